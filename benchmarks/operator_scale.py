"""Benchmark: WorkloadRecovery status writes of the operator shell at many workloads, on a real kube-apiserver.

Runs the real ``Engine`` (the engine tests' in-memory ``FakeScheduler`` for ``--workloads N``
RUNNING opted-in jobs, SQLite audit store in a temporary folder) with the operator shell's record
listener, reporter and status writer (``k8s/operator/``, ``k8s/coalesce.py``) against the local
kube-apiserver of ``hack/local-kube.sh up`` (CRDs applied, a fresh namespace). It creates every
WorkloadRecovery (the shell's reconcile round), then for ``--seconds`` the engine reports
``--rate`` records a second spread over random workloads (anomaly records, each a status change).
``--mode per-record`` writes each record's status at once (the shell before coalescing) for
comparison. It prints one JSON object:

- ``create_s``: the reconcile round that created all N objects;
- ``records``, ``status_patches``; ``writes_per_s_mean`` / ``writes_per_s_max`` (status patches per
  second over the updates and the drain, the worst one-second window during the updates),
  ``budget_writes_per_s`` (the coalescer's bound: its token bucket holds one second's worth, so one
  window can see up to twice the budget, the average never more);
- ``drain_s``: end of the updates -> every status written; ``differing``: objects whose stored status
  is not the projection of the engine's state after the drain (must be 0);
- ``rss_mb`` / ``rss_peak_mb`` of this process (engine + shell), ``rss_before_mb`` before the engine
  and the shell were made.

    hack/local-kube.sh up
    .venv/bin/python benchmarks/operator_scale.py --workloads 1000 --seconds 60 --rate 200
    .venv/bin/python benchmarks/operator_scale.py --workloads 1000 --seconds 60 --rate 200 --mode per-record
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from kubernetes_asyncio import client as k8s  # noqa: E402

from tests.support import fake_scheduler, kube  # noqa: E402
from trainguard import engine as engine_mod  # noqa: E402
from trainguard import settings as settings_mod  # noqa: E402
from trainguard.detect import catalog as catalog_mod  # noqa: E402
from trainguard.k8s import client, operator, recovery, status  # noqa: E402  # noqa: E402
from trainguard.model import clock, vocab, workloads  # noqa: E402
from trainguard.policy import loader  # noqa: E402
from trainguard.store import database  # noqa: E402

POLICY = """
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: bench}
spec: {mode: Monitor}
"""
CATEGORIES = ["nccl_timeout", "segfault", "oom_gpu", "python_exception", "filesystem_io"]


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def _kubectl(local: kube.LocalKube, *args: str) -> None:
    done = subprocess.run([str(local.kubectl_path), "--kubeconfig", str(local.kubeconfig), *args],
                          capture_output=True, text=True, check=False, timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(args)}: {done.stderr.strip()}")


async def run(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    local = kube.LocalKube.load(kube.kube_dir())
    _kubectl(local, "apply", "-k", str(REPO / "crds"))
    namespace = f"tg-bench-{uuid.uuid4().hex[:8]}"
    _kubectl(local, "create", "namespace", namespace)
    rss_before = _rss_mb()
    scheduler = fake_scheduler.FakeScheduler(nodes=["node1", "node2"])
    for i in range(args.workloads):
        out = folder / f"{i}.out"
        out.touch()
        scheduler.jobs[str(i)] = workloads.JobSnapshot(
            workload=f"slurm/bench/{i}", job_id=str(i), name=f"train-{i}", state=workloads.JobState.RUNNING,
            nodes=["node1", "node2"], comment="trainguard policy=bench", stdout_path=str(out))
    store = await database.open_store(f"sqlite+aiosqlite:///{folder / 'audit.db'}")
    shell = operator.Shell(operator.OperatorConfig(scheduler="slurm-local", workload_namespace=namespace))
    shell.api = await client.load_api_client(str(local.kubeconfig))
    shell.store = store
    per_record = args.mode == "per-record"

    async def listener(kind: str, workload: str, payload: dict[str, object]) -> None:
        if per_record:
            await shell.recoveries.write_status(workload)
        else:
            await shell.reporting.on_record(kind, workload, payload)

    engine = engine_mod.Engine(scheduler, store, loader.parse_text(POLICY, "bench"), catalog_mod.load_catalog(),
                               clock_=clock.SystemClock(), settings=settings_mod.EngineSettings(),
                               listeners=[listener])
    shell.engine = engine
    await engine.discover()
    t0 = time.monotonic()
    await shell.recoveries.reconcile()
    create_s = time.monotonic() - t0
    stop = asyncio.Event()
    tasks = [asyncio.ensure_future(shell.reporting.report_forever(stop)),
             asyncio.ensure_future(shell.recoveries.coalescer.run(stop, shell.recoveries.write_status))]
    rng = random.Random(args.seed)
    names = list(engine.runtimes)
    patches0 = shell.recoveries.stats.patches
    per_second: list[int] = []
    records = 0
    start = time.monotonic()
    second_start, second_patches = start, shell.recoveries.stats.patches
    while time.monotonic() - start < args.seconds:
        due = int((time.monotonic() - start) * args.rate)
        while records < due:
            rt = engine.runtimes[rng.choice(names)]
            await engine.notify(rt, vocab.AuditKind.ANOMALY, {
                "symptom": "crash", "category": rng.choice(CATEGORIES), "suspect_nodes": ["node2"],
                "evidence": [{"line": records, "text": "x", "pattern": f"p-{records}"}]})
            records += 1
        await asyncio.sleep(0.01)
        if time.monotonic() - second_start >= 1.0:
            per_second.append(shell.recoveries.stats.patches - second_patches)
            second_start, second_patches = time.monotonic(), shell.recoveries.stats.patches
    updates_end = time.monotonic()
    while True:  # the drain: every queued record reported and every dirty status written
        if shell.reporting.records.empty() and not shell.recoveries.coalescer.pending():
            break
        await asyncio.sleep(0.1)
    drain_s = time.monotonic() - updates_end
    answer = await k8s.CustomObjectsApi(shell.api).list_namespaced_custom_object(
        recovery.GROUP, recovery.VERSION, namespace, recovery.PLURAL)
    listed = status.names_of(answer["items"])
    now = datetime.datetime.now(datetime.UTC)
    differing = sum(1 for rt in engine.runtimes.values()
                    if status.differs(status.view_of(rt), listed[status.object_name(rt.workload)], now=now))
    elapsed = updates_end - start
    result = {
        "workloads": args.workloads,
        "mode": args.mode,
        "seconds": round(elapsed, 1),
        "rate": args.rate,
        "create_s": round(create_s, 1),
        "records": records,
        "status_patches": shell.recoveries.stats.patches - patches0,
        "writes_per_s_mean": round((shell.recoveries.stats.patches - patches0) / max(elapsed + drain_s, 1e-9), 1),
        "writes_per_s_max": max(per_second, default=0),
        "budget_writes_per_s": None if per_record else shell.recoveries.coalescer.max_writes_per_s,
        "drain_s": round(drain_s, 1),
        "differing": differing,
        "rss_before_mb": round(rss_before, 1),
        "rss_mb": round(_rss_mb(), 1),
        "rss_peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    await shell.api.close()
    await store.close()
    _kubectl(local, "delete", "namespace", namespace, "--wait=false")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rate", type=float, default=200.0, help="engine records a second, over all workloads")
    parser.add_argument("--mode", choices=("coalesced", "per-record"), default="coalesced")
    parser.add_argument("--seed", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tg-opscale-") as folder:
        print(json.dumps(asyncio.run(run(args, Path(folder))), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
