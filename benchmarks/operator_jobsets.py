"""Benchmark: ``trainguard operator --scheduler kubernetes`` following many JobSets (issue 28, goal 2).

On the simulated cluster (real etcd + kube-apiserver + kube-controller-manager + kube-scheduler,
kwok fake nodes, the real JobSet controller: ``hack/local-kube.sh up --cluster``), used if up on the
ports of this environment (TG_SIM_PORT_BASE, TG_SIM_KUBE_DIR, ...), else started and stopped at the end,
as ``kube_recovery_latency.py`` does.

1. Room for the pods: the 4 nodes of ``up --cluster`` hold 110 pods each, so this adds
   ceil(N / ``--pods-per-node``) more kwok-managed fake nodes ``kwok-bench-1..`` (the annotations and
   labels of ``hack/lib/sim-cluster.sh``'s kwok-node-N, no GPUs, ``pods`` = ``--pods-per-node``, default
   1000); they are deleted at the end.
2. The cluster's cost, reported apart: ``--jobsets N`` JobSets (1 replicated job x 1 pod, no GPU, no
   headless Service, annotated ``trainguard.dev/policy: bench``, a Monitor RecoveryPolicy) created with
   ``kubectl create`` of a List of ``--batch`` at a time (``create_s``), then until all N pods are Running
   (``all_running_s``, from the first create). Each pod then gets its kwok ``Logs`` object and a log file
   with one line (as ``kube_recovery_latency.py`` does; created in Lists too, ``logs_s``).
3. The operator is started once every pod runs (``operator.run`` in this process, default engine
   settings, the SQLite audit store in a temporary folder or ``--db``). Measured: ``tracked_after_s``
   (operator start -> the engine tracks all N workloads), ``recoveries_after_s`` (-> all N
   WorkloadRecovery objects created), then a steady window of ``--steady-s`` seconds: the process's CPU
   cores (CPU s / wall s over the window's second half, ``getrusage`` of this process: the benchmark's own
   sampler is idle meanwhile) and its RSS (sampled every second; ``rss_before_operator_mb`` is this
   process before the operator), apiserver writes to ``workloadrecoveries`` per second (the apiserver's
   own ``apiserver_request_total``; also the status writer's ``SyncStats.patches``) against the
   coalescer's budget, and where the CPU goes (``py-spy record --gil --nonblocking`` on this process over
   the window when ``--py-spy`` names the binary: the share per asyncio task's outermost package, kopf's
   share, the top functions by own time).
4. ``--crashes K`` pods of random JobSets print an Xid 79 line (their kwok log file) and are failed
   through kwok's stage at the same instant (t0), ``--crash-gap`` seconds apart: ``detect_s`` = t0 ->
   anomaly recorded (audit time), p50/p99/max, and ``missed`` (none within ``--detect-timeout``).
5. At the end, once the coalescer has nothing pending: every WorkloadRecovery's status is compared with
   the engine's state (``differing``, as ``operator_scale.py``).

Goals (issue 28 goal 1 applied to the operator): tracked_after_s <= 30, detect p50 <= 1 s and p99 <= 2 s,
nothing missed, <= 1 core and <= 1 GiB (peak RSS of this process, which is the operator plus a small
benchmark). One JSON object on stdout; exit 1 when a goal is missed (by how much on stderr).

    .venv/bin/python benchmarks/operator_jobsets.py --jobsets 2000 [--crashes 10] [--py-spy /tmp/spyenv/bin/py-spy]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import datetime
import itertools
import json
import math
import os
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks import profiles, scale  # noqa: E402
from kubernetes_asyncio import client as k8s  # noqa: E402

from tests.support import services  # noqa: E402
from tests.support.kube import SCRIPT, LocalKube  # noqa: E402
from tests.support.kube_cluster import SimCluster, cri_line, port_base, sim_dir, sim_env  # noqa: E402
from trainguard import settings as settings_mod  # noqa: E402
from trainguard.k8s import operator, recovery, status  # noqa: E402
from trainguard.k8s.kubejobs import common  # noqa: E402
from trainguard.k8s.operator import entry  # noqa: E402
from trainguard.model import vocab  # noqa: E402
from trainguard.store import database  # noqa: E402

XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus."
POLICY = """apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {{name: bench, namespace: {ns}}}
spec: {{mode: Monitor}}
"""
BENCH_NODE = "kwok-bench-{}"
GOALS = {"tracked_after_s": 30.0, "detect_p50_s": 1.0, "detect_p99_s": 2.0, "missed": 0, "cpu_cores": 1.0,
         "rss_peak_mb": 1024.0}

SHELLS: list[operator.Shell] = []


class _Shell(operator.Shell):
    """The operator's shell, remembered so the benchmark can read its engine and status writer."""

    def __post_init__(self) -> None:
        super().__post_init__()
        SHELLS.append(self)


def node_manifest(name: str, pods: int) -> dict[str, Any]:
    """A kwok-managed fake node like hack/lib/sim-cluster.sh's kwok-node-N, without GPUs, room for ``pods``."""
    resources = {"cpu": "1000", "memory": "4Ti", "pods": str(pods)}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name,
                         "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                         "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                    "kubernetes.io/arch": "amd64", "type": "kwok", "trainguard.dev/sim-rack": "bench"}},
            "spec": {"taints": []},
            "status": {"allocatable": resources, "capacity": resources,
                       "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                                     {"type": "Hostname", "address": name}]}}


def as_list(items: list[dict[str, Any]]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


def phases(sim: SimCluster, ns: str) -> list[tuple[str, str, str]]:
    """(pod, jobset, phase) of the namespace's pods not being deleted, without parsing the whole JSON here."""
    out = sim.kubectl("get", "pods", "-n", ns, "--chunk-size=2000", "-o",
                      "jsonpath={range .items[*]}{.metadata.name}"
                      " {.metadata.labels.jobset\\.sigs\\.k8s\\.io/jobset-name}"
                      " {.status.phase} {.metadata.deletionTimestamp}{\"\\n\"}{end}", timeout=300)
    rows = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3:
            rows.append((parts[0], parts[1], parts[2]))
    return rows


def wr_requests(sim: SimCluster) -> dict[str, int]:
    """apiserver_request_total for resource workloadrecoveries, summed by verb (all clients: only the operator
    touches them here)."""
    counts: dict[str, int] = collections.Counter()
    for line in sim.kubectl("get", "--raw", "/metrics", timeout=120).splitlines():
        if line.startswith("apiserver_request_total{") and 'resource="workloadrecoveries"' in line:
            labels, value = line.rsplit(" ", 1)
            verb = labels.split('verb="', 1)[1].split('"', 1)[0]
            counts[verb] += int(float(value))
    return dict(counts)


def writes_of(counts: dict[str, int]) -> int:
    return sum(v for k, v in counts.items() if k in ("POST", "PATCH", "PUT", "DELETE"))


def connections(port: int) -> int:
    """ESTABLISHED TCP connections of this process to ``port`` (the apiserver) from /proc."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] == "01" and int(cols[2].rsplit(":", 1)[1], 16) == port and cols[9] in inodes:
                    found += 1
    return found


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))], 3)


async def until(what: str, probe: Any, limit_s: float, interval: float = 0.2) -> float:
    """Seconds until ``probe()`` is true (raises TimeoutError after ``limit_s``)."""
    start = time.monotonic()
    while not probe():
        if time.monotonic() - start > limit_s:
            raise TimeoutError(what)
        await asyncio.sleep(interval)
    return time.monotonic() - start


async def bench(args: argparse.Namespace, sim: SimCluster, workdir: Path) -> dict[str, Any]:
    n = args.jobsets
    out: dict[str, Any] = {"jobsets": n, "code": scale.code_commit(),
                           "started": datetime.datetime.now(datetime.UTC).isoformat()}
    extra = math.ceil(n / args.pods_per_node)
    sim.kubectl("create", "-f", "-", input=as_list([node_manifest(BENCH_NODE.format(i), args.pods_per_node)
                                                   for i in range(1, extra + 1)]))
    out["extra_nodes"] = {"count": extra, "pods_each": args.pods_per_node}
    ns = sim.create_namespace("opjs")
    sim.kubectl("apply", "-k", str(REPO_ROOT / "crds"))
    sim.apply(POLICY.format(ns=ns))
    names = [f"js-{i:05d}" for i in range(n)]
    t_create = time.monotonic()
    for i in range(0, n, args.batch):
        items = []
        for name in names[i:i + args.batch]:
            manifest = sim.jobset_manifest(name, ns, replicated_jobs=(("w", 1, 1),), gpus=0,
                                           annotations={"trainguard.dev/policy": "bench"})
            manifest["spec"]["network"] = {"enableDNSHostnames": False}  # no headless Service per JobSet
            items.append(manifest)
        await asyncio.to_thread(sim.kubectl, "create", "-f", "-", input=as_list(items), timeout=600)
    out["create_s"] = round(time.monotonic() - t_create, 1)
    print(f"created {n} JobSets in {out['create_s']} s", file=sys.stderr, flush=True)
    rows: list[tuple[str, str, str]] = []
    last_report = 0.0
    while True:
        rows = await asyncio.to_thread(phases, sim, ns)
        running = sum(1 for r in rows if r[2] == "Running")
        if running >= n:
            break
        elapsed = time.monotonic() - t_create
        if elapsed - last_report >= 30:
            print(f"  {elapsed:.0f} s: {len(rows)} pods, {running} Running", file=sys.stderr, flush=True)
            last_report = elapsed
        if elapsed > args.cluster_timeout:
            out["cluster_timeout"] = {"pods": len(rows), "running": running, "after_s": round(elapsed)}
            raise TimeoutError(json.dumps(out))
        await asyncio.sleep(2.0 if n <= 1000 else 5.0)
    out["all_running_s"] = round(time.monotonic() - t_create, 1)
    print(f"all {n} pods Running {out['all_running_s']} s after the first create", file=sys.stderr, flush=True)
    pod_of = {js: pod for pod, js, phase in rows if phase == "Running"}
    t_logs = time.monotonic()
    logs = []
    for pod in pod_of.values():
        path = sim.pod_log_dir / ns / f"{pod}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(cri_line("iteration 1 loss 2.0"))
        logs.append({"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs", "metadata": {"name": pod, "namespace": ns},
                     "spec": {"logs": [{"containers": ["main"], "logsFile": str(path), "follow": True}]}})
    for i in range(0, len(logs), args.batch * 5):
        await asyncio.to_thread(sim.kubectl, "create", "-f", "-", input=as_list(logs[i:i + args.batch * 5]),
                                timeout=600)
    out["logs_s"] = round(time.monotonic() - t_logs, 1)

    # ---- the operator
    db_url = args.db or f"sqlite+aiosqlite:///{workdir / 'audit.db'}"
    config = operator.OperatorConfig(scheduler="kubernetes", namespaces=(ns,), workload_namespace=ns,
                                     engine=settings_mod.EngineSettings(), db_url=db_url)
    out["operator"] = {"db": database.safe_url(db_url), "status_interval_s": config.status_interval_s,
                       "started": "after all pods Running"}
    requests0 = await asyncio.to_thread(wr_requests, sim)
    rss_before = scale._rss_mb()
    samples: list[tuple[float, float, float, int]] = []  # (monotonic, cpu s, rss MB, status patches)
    stop = asyncio.Event()
    entry.Shell = _Shell  # type: ignore[attr-defined]  # remember the shell (its engine and status writer)
    t_start = time.monotonic()
    task = asyncio.create_task(operator.run(config, stop_flag=stop))
    sampling = True

    async def sampler() -> None:
        while sampling:
            shell = SHELLS[-1] if SHELLS else None
            patches = shell.recoveries.stats.patches if shell else 0
            samples.append((time.monotonic(), scale._cpu_s(), scale._rss_mb(), patches))
            await asyncio.sleep(1.0)

    sampler_task = asyncio.create_task(sampler())

    def shell_() -> operator.Shell | None:
        if task.done():
            task.result()  # the operator stopped: raise what it raised
        return SHELLS[-1] if SHELLS else None

    def tracked() -> int:
        shell = shell_()
        return len(shell.engine.runtimes) if shell is not None and shell.engine is not None else 0

    try:
        try:
            out["tracked_after_s"] = round(await until("all tracked", lambda: tracked() >= n, args.track_timeout), 2)
        except TimeoutError:
            out["tracked_after_s"] = None
            out["tracked_at_timeout"] = tracked()
        shell = shell_()
        assert shell is not None
        try:
            out["recoveries_after_s"] = round(time.monotonic() - t_start + await until(
                "all WorkloadRecovery objects", lambda: len(shell.recoveries.objects) >= n, args.track_timeout), 2)
        except TimeoutError:
            out["recoveries_after_s"] = None
            out["recoveries_at_timeout"] = len(shell.recoveries.objects)
        print(f"tracked after {out['tracked_after_s']} s, recoveries after {out['recoveries_after_s']} s",
              file=sys.stderr, flush=True)
        requests1 = await asyncio.to_thread(wr_requests, sim)
        # ---- the steady window
        spy = None
        profile = workdir / "profile.txt"
        if args.py_spy:
            spy = await asyncio.create_subprocess_exec(
                args.py_spy, "record", "--pid", str(os.getpid()), "--gil", "--nonblocking", "--rate", "50",
                "--duration", str(int(args.steady_s)), "--format", "raw", "--output", str(profile),
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
        t_steady = time.monotonic()
        await asyncio.sleep(args.steady_s)
        t_steady_end = time.monotonic()
        api_port = int(sim.kube.server.rsplit(":", 1)[1])
        podlog_tasks = [t for t in asyncio.all_tasks() if t.get_name().startswith("podlog:") and not t.done()]
        out["streams"] = {"apiserver_connections": connections(api_port), "podlog_follow_tasks": len(podlog_tasks)}
        requests2 = await asyncio.to_thread(wr_requests, sim)
        if spy is not None:
            _, err = await spy.communicate()
            out["profile"] = profiles.profile_summary(profile) if profile.exists() else {"error": err.decode()[-300:]}
            if profile.exists() and args.profile_out:
                shutil.copy(profile, args.profile_out)
        half = [s for s in samples if t_steady + args.steady_s / 2 <= s[0] <= t_steady_end]
        if len(half) >= 2:
            out["cpu_cores"] = round((half[-1][1] - half[0][1]) / (half[-1][0] - half[0][0]), 3)
        whole = [s for s in samples if s[0] >= t_start]
        out["cpu_cores_start_to_tracked"] = round(
            (next((s[1] for s in whole if s[0] >= t_start + (out["tracked_after_s"] or 0)), whole[-1][1]) - whole[0][1])
            / max(out["tracked_after_s"] or 1e-9, 1e-9), 3) if whole else None
        # ---- crashes
        rng = random.Random(args.seed)
        victims = rng.sample(sorted(pod_of), min(args.crashes, len(pod_of)))
        t0s: dict[str, float] = {}
        store = await database.open_store(db_url)
        try:
            since = datetime.datetime.now(datetime.UTC)
            for js in victims:
                pod = pod_of[js]
                t0 = time.time()
                with (sim.pod_log_dir / ns / f"{pod}.log").open("a") as handle:
                    handle.write(cri_line(XID))
                await asyncio.to_thread(sim.fail_pod, ns, pod, 1)
                t0s[common.workload_id(ns, "JobSet", js)] = t0
                await asyncio.sleep(args.crash_gap)
            found: dict[str, tuple[float, str]] = {}
            deadline = time.monotonic() + args.detect_timeout
            while len(found) < len(t0s) and time.monotonic() < deadline:
                for record in await store.audit_records(kind=vocab.AuditKind.ANOMALY, since=since):
                    if record.workload in t0s and record.workload not in found:
                        found[record.workload] = (record.time.timestamp() - t0s[record.workload],
                                                  str(record.payload.get("category")))
                await asyncio.sleep(0.25)
        finally:
            await store.close()
        detect = [v[0] for v in found.values()]
        out["crashes"] = len(t0s)
        out["missed"] = len(t0s) - len(found)
        out["categories"] = dict(collections.Counter(v[1] for v in found.values()))
        if detect:
            out["detect_s"] = {"p50": pct(detect, 0.5), "p99": pct(detect, 0.99), "max": round(max(detect), 3),
                               "mean": round(statistics.mean(detect), 3)}
        # ---- exact statuses, once nothing is pending
        t_drain = time.monotonic()
        try:
            await until("the coalescer drained", lambda: shell.reporting.records.empty()
                        and not shell.recoveries.coalescer.pending(), args.drain_timeout, 0.5)
            await asyncio.sleep(config.status_interval_s * 2)  # a reconcile round marks what still differs
            await until("the coalescer drained", lambda: not shell.recoveries.coalescer.pending(),
                        args.drain_timeout, 0.5)
        except TimeoutError:
            out["drain_timeout"] = True
        out["drain_s"] = round(time.monotonic() - t_drain, 1)
        assert shell.api is not None and shell.engine is not None
        answer = await k8s.CustomObjectsApi(shell.api).list_namespaced_custom_object(
            recovery.GROUP, recovery.VERSION, ns, recovery.PLURAL)
        listed = status.names_of(answer["items"])
        now = datetime.datetime.now(datetime.UTC)
        missing = differing = 0
        for rt in list(shell.engine.runtimes.values()):
            obj = listed.get(status.object_name(rt.workload))
            if obj is None:
                missing += 1
            elif status.differs(await shell.recoveries._view(rt), obj, now=now):
                differing += 1
        phases_ = collections.Counter(str((o.get("status") or {}).get("phase")) for o in listed.values())
        out["workloadrecoveries"] = {"objects": len(listed), "missing": missing, "differing": differing,
                                     "phases": dict(phases_)}
        requests3 = await asyncio.to_thread(wr_requests, sim)
        t_end = time.monotonic()
        sampling = False
        await sampler_task
        per_second = [b[3] - a[3] for a, b in itertools.pairwise(samples)]
        steady_writes = writes_of(requests2) - writes_of(requests1)
        out["writes"] = {
            "budget_writes_per_s": shell.recoveries.coalescer.max_writes_per_s,
            "apiserver_by_verb": {k: v - requests0.get(k, 0) for k, v in requests3.items()},
            "start_to_recoveries": writes_of(requests1) - writes_of(requests0),
            "start_to_recoveries_per_s": round((writes_of(requests1) - writes_of(requests0))
                                               / max(out["recoveries_after_s"] or (t_steady - t_start), 1e-9), 1),
            "steady_per_s_mean": round(steady_writes / (t_steady_end - t_steady), 2),
            "whole_run_per_s_mean": round((writes_of(requests3) - writes_of(requests0)) / (t_end - t_start), 2),
            "status_patches": shell.recoveries.stats.patches,
            "status_patches_worst_second": max(per_second, default=0),
            "status_patches_conflicts": shell.recoveries.stats.conflicts,
        }
        out["rss_before_operator_mb"] = round(rss_before, 1)
        out["rss_peak_mb"] = round(max(s[2] for s in samples), 1)
        out["rss_end_mb"] = round(samples[-1][2], 1)
        out["ru_maxrss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    finally:
        sampling = False
        stop.set()
        try:
            await asyncio.wait_for(task, 120)
        except Exception as exc:  # reported; the cleanup goes on
            out["operator_error"] = repr(exc)[:300]
        await asyncio.to_thread(sim.kube.kubectl, "delete", "namespace", ns, "--wait=false")
        await asyncio.to_thread(sim.kube.kubectl, "delete", "nodes", "-l", "trainguard.dev/sim-rack=bench",
                                "--wait=false")
        shutil.rmtree(sim.pod_log_dir / ns, ignore_errors=True)
    return out


def misses(out: dict[str, Any]) -> list[str]:
    found = []
    checks = [("tracked_after_s", out.get("tracked_after_s")),
              ("detect_p50_s", (out.get("detect_s") or {}).get("p50")),
              ("detect_p99_s", (out.get("detect_s") or {}).get("p99")),
              ("missed", out.get("missed")), ("cpu_cores", out.get("cpu_cores")),
              ("rss_peak_mb", out.get("rss_peak_mb"))]
    for key, value in checks:
        goal = GOALS[key]
        if value is None:
            found.append(f"{key}: not measured (goal <= {goal})")
        elif value > goal:
            found.append(f"{key}: {value} > goal {goal} (by {round(value - goal, 3)})")
    wr = out.get("workloadrecoveries") or {}
    if wr.get("missing") or wr.get("differing"):
        found.append(f"WorkloadRecovery statuses: {wr.get('missing')} missing, {wr.get('differing')} differing")
    return found


async def main_async(args: argparse.Namespace) -> int:
    directory, env = sim_dir(), sim_env()
    services.run_script([str(SCRIPT), "build", "--cluster"], env, timeout=3600)
    with services.shared_service(SCRIPT, directory, env, up_args=("--cluster",), status_args=("--cluster",)):
        sim = SimCluster(kube=LocalKube.load(directory), port_base=port_base(),
                         pod_log_dir=directory / "cluster" / "pod-logs")
        os.environ["KUBECONFIG"] = str(sim.kubeconfig)
        with tempfile.TemporaryDirectory(prefix="tg-opjs-") as workdir:
            out = await bench(args, sim, Path(workdir))
    out["goals"] = GOALS
    found = misses(out)
    out["goals_met"] = not found
    print(json.dumps(out, indent=1))
    for line in found:
        print(f"goal missed: {line}", file=sys.stderr)
    return 1 if found else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobsets", type=int, default=500)
    parser.add_argument("--batch", type=int, default=100, help="JobSets per kubectl create (a List)")
    parser.add_argument("--pods-per-node", type=int, default=1000)
    parser.add_argument("--crashes", type=int, default=10)
    parser.add_argument("--crash-gap", type=float, default=2.0, help="seconds between two crashes")
    parser.add_argument("--steady-s", type=float, default=60.0)
    parser.add_argument("--track-timeout", type=float, default=600.0)
    parser.add_argument("--detect-timeout", type=float, default=60.0)
    parser.add_argument("--drain-timeout", type=float, default=180.0)
    parser.add_argument("--cluster-timeout", type=float, default=1500.0)
    parser.add_argument("--db", help="audit store URL (default: SQLite in a temporary folder)")
    parser.add_argument("--py-spy", help="py-spy binary: profile this process over the steady window")
    parser.add_argument("--profile-out", help="keep py-spy's raw profile here")
    parser.add_argument("--seed", type=int, default=28)
    args = parser.parse_args()
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
