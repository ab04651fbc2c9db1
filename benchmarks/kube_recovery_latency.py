"""Benchmark: recovery latency of ``trainguard operator --scheduler kubernetes`` on the simulated cluster.

Beside ``benchmarks/recovery_latency.py`` (Slurm). ``--repeat`` runs (default 3), each a fresh JobSet
of 2 replicated jobs x 2 pods (4 GPUs each) on kwok's fake GPU nodes, opted in to an Action policy;
the operator runs in this process with the cluster-wide Action switch on. In each run one pod
prints an Xid 79 line (its kwok ``Logs`` file) and is failed through kwok's stage at the same
instant (t0). Printed as one JSON object, p50/p95/max over the runs of:

- ``detect_s``: t0 -> anomaly recorded (audit time);
- ``exclude_issued_s``: t0 -> our ``exclude_nodes`` action row done (cordon + taint written), which is
  the restart we issue: the taint evicts, and the JobSet's own failure policy restarts the job;
- ``restarted_s``: t0 -> the JobSet's ``status.restarts`` advanced (its controller; polled every 0.2 s);
- ``running_again_s``: t0 -> all 4 pods of the new attempt Running, none on the suspect node.

Needs the simulated cluster: it is used if up on the ports of this environment (TG_KUBE_API_PORT,
TG_SIM_PORT_BASE, ...), else started with ``hack/local-kube.sh up --cluster`` and stopped at the end.
Exit 0 when every run ended with the node excluded and the new pods elsewhere, 1 otherwise.

    .venv/bin/python benchmarks/kube_recovery_latency.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.support import services  # noqa: E402
from tests.support.kube import SCRIPT, LocalKube  # noqa: E402
from tests.support.kube_cluster import (  # noqa: E402
    JOBSET_NAME_LABEL,
    JOBSET_RESTART_LABEL,
    NODES,
    SimCluster,
    port_base,
    sim_dir,
    sim_env,
)
from trainguard import settings as settings_mod  # noqa: E402
from trainguard.k8s import operator  # noqa: E402
from trainguard.k8s.kubejobs import common, nodes  # noqa: E402
from trainguard.model import vocab  # noqa: E402
from trainguard.store import database  # noqa: E402

XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus."
POLICY = """apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {{name: bench, namespace: {ns}}}
spec:
  mode: Action
  detection: {{settle: 1s, hangTimeout: 600s}}
  blastRadius: {{maxActionsPerHour: 1000}}
"""
WAIT_S = 180.0


def running(sim: SimCluster, ns: str, attempt: int) -> list[dict[str, Any]] | None:
    pods = [p for p in sim.pods(ns, f"{JOBSET_NAME_LABEL}=train") if not p["metadata"].get("deletionTimestamp")
            and p["metadata"]["labels"].get(JOBSET_RESTART_LABEL) == str(attempt)]
    if len(pods) == 4 and all(p.get("status", {}).get("phase") == "Running" for p in pods):
        return pods
    return None


async def poll(what: str, probe: Any, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + WAIT_S
    while True:
        found = await asyncio.to_thread(probe)
        if found:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(interval)


async def one_run(sim: SimCluster, index: int, workdir: Path) -> dict[str, Any]:
    ns = sim.create_namespace(f"bench{index}")
    sim.kubectl("apply", "-k", str(REPO_ROOT / "crds"))
    sim.apply(POLICY.format(ns=ns))
    sim.create_jobset("train", ns, replicated_jobs=(("leaders", 1, 2), ("workers", 1, 2)), gpus=4,
                      annotations={"trainguard.dev/policy": "bench"})
    first = await poll("4 running pods", lambda: running(sim, ns, 0))
    for pod in first:
        sim.write_pod_log(ns, pod["metadata"]["name"], ["iteration 1 loss 2.0"])
    victim = next((p for p in first if p["spec"]["nodeName"] == "kwok-node-2"), first[1])
    bad = victim["spec"]["nodeName"]
    db = workdir / f"audit-{index}.db"
    config = operator.OperatorConfig(scheduler="kubernetes", namespaces=(ns,), workload_namespace=ns,
                                     engine=settings_mod.EngineSettings(allow_action=True, discovery_interval_s=0.5),
                                     db_url=f"sqlite+aiosqlite:///{db}", status_interval_s=1.0)
    stop = asyncio.Event()
    task = asyncio.create_task(operator.run(config, stop_flag=stop))
    wid = common.workload_id(ns, "JobSet", "train")
    result: dict[str, Any] = {"node": bad}
    try:
        await poll("the workload tracked", lambda: sim.get("workloadrecovery", "jobset-train", ns))
        t0 = time.time()
        sim.write_pod_log(ns, victim["metadata"]["name"], [XID])
        sim.fail_pod(ns, victim["metadata"]["name"], exit_code=1)

        def restarts() -> int:
            return int(((sim.get("jobset", "train", ns) or {}).get("status") or {}).get("restarts") or 0)

        await poll("the JobSet restarted", lambda: restarts() >= 1)
        result["restarted_s"] = round(time.time() - t0, 3)
        def moved() -> list[dict[str, Any]] | None:
            pods = running(sim, ns, restarts())
            return pods if pods and all(p["spec"]["nodeName"] != bad for p in pods) else None

        again = await poll("the new attempt running off the bad node", moved)
        result["running_again_s"] = round(time.time() - t0, 3)
        store = await database.open_store(f"sqlite+aiosqlite:///{db}")
        try:
            deadline = time.monotonic() + WAIT_S
            while not await store.audit_records(workload=wid, kind=vocab.AuditKind.OUTCOME):
                if time.monotonic() > deadline:
                    raise TimeoutError("outcome")
                await asyncio.sleep(0.2)
            records = await store.audit_records(workload=wid)
        finally:
            await store.close()
        anomaly = next(r for r in records if r.kind is vocab.AuditKind.ANOMALY)
        result["detect_s"] = round(anomaly.time.timestamp() - t0, 3)
        excluded = [r for r in records if r.kind is vocab.AuditKind.ACTION and r.payload.get("step") == "exclude_nodes"
                    and r.payload.get("status") == "done"]
        result["exclude_issued_s"] = round(excluded[0].time.timestamp() - t0, 3) if excluded else None
        result["ok"] = bool(excluded) and nodes.has_our_taint(sim.get("node", bad) or {}) and bool(again)
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)
        for name in NODES:
            obj = sim.get("node", name) or {}
            if nodes.exclusion_of(obj) is not None:
                sim.kubectl("patch", "node", name, "--type=merge", "-p", json.dumps(nodes.lift_patch(obj)))
        sim.delete_namespace(ns)
    return result


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"p50": round(statistics.median(ordered), 3),
            "p95": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 3), "max": round(ordered[-1], 3)}


async def main_async(repeat: int) -> int:
    directory, env = sim_dir(), sim_env()  # the simulated cluster's own API, as the tests run it
    services.run_script([str(SCRIPT), "build", "--cluster"], env, timeout=3600)
    with services.shared_service(SCRIPT, directory, env, up_args=("--cluster",), status_args=("--cluster",)):
        sim = SimCluster(kube=LocalKube.load(directory), port_base=port_base(),
                         pod_log_dir=directory / "cluster" / "pod-logs")
        os.environ["KUBECONFIG"] = str(sim.kubeconfig)
        with tempfile.TemporaryDirectory() as workdir:
            runs = [await one_run(sim, i, Path(workdir)) for i in range(repeat)]
    out: dict[str, Any] = {"runs": len(runs), "scenario": "jobset-xid79"}
    for key in ("detect_s", "exclude_issued_s", "restarted_s", "running_again_s"):
        values = [r[key] for r in runs if isinstance(r.get(key), (int, float))]
        if values:
            out[key] = summary(values)
    out["final_ok"] = all(r.get("ok") for r in runs)
    print(json.dumps(out))
    return 0 if out["final_ok"] else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    return asyncio.run(main_async(args.repeat))


if __name__ == "__main__":
    sys.exit(main())
