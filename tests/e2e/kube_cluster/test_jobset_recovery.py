"""End to end on the simulated cluster: ``trainguard operator --scheduler kubernetes`` with the real
JobSet controller, kube-scheduler and kwok (fake GPU nodes ``kwok-node-1..4``).

A JobSet of 2 replicated jobs x 2 pods (4 GPUs each) runs on the 4 nodes, opted in with
``trainguard.dev/policy``. One pod prints an Xid 79 line in its log (kwok ``Logs``) and fails.
- Action: its node is cordoned and tainted by us, the JobSet restarts (its own failure policy; we
  never suspend it), the new pods avoid that node, and the JobSet completes (kwok completion stage).
- Monitor: the advice is recorded and nothing is changed (no cordon, no taint, no suspend).
A JobSet without the annotation in the same namespace is never touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.support.kube_cluster import JOBSET_NAME_LABEL, JOBSET_RESTART_LABEL, NODES, SimCluster
from trainguard.k8s import operator
from trainguard.k8s.kubejobs import common, nodes
from trainguard.model import vocab
from trainguard.store import database

pytestmark = [pytest.mark.e2e, pytest.mark.kube, pytest.mark.kube_cluster, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[3]
WAIT_S = 180.0
XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus."
POLICY = """apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {{name: gpu, namespace: {ns}}}
spec:
  mode: {mode}
  detection: {{settle: 1s, hangTimeout: 600s}}
"""


async def until(what: str, probe: Any, within_s: float = WAIT_S) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while True:
        found = await asyncio.to_thread(probe)
        if found:
            return found
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.5)


def lines_read(db: Path, workload: str) -> int:
    """Lines of the workload the engine has handed to detection and saved its place after (its tail
    positions in the audit store)."""
    if not db.exists():
        return 0
    with contextlib.closing(sqlite3.connect(db, timeout=5)) as connection:
        try:
            row = connection.execute("SELECT max(lineno) FROM tail_positions WHERE workload = ?",
                                     (workload,)).fetchone()
        except sqlite3.OperationalError:  # the schema is not there yet
            return 0
    return int(row[0] or 0)


def pods_of(sim: SimCluster, ns: str, name: str) -> list[dict[str, Any]]:
    return [p for p in sim.pods(ns, f"{JOBSET_NAME_LABEL}={name}") if not p["metadata"].get("deletionTimestamp")]


def running(sim: SimCluster, ns: str, name: str, attempt: int) -> list[dict[str, Any]] | None:
    pods = [p for p in pods_of(sim, ns, name) if p["metadata"]["labels"].get(JOBSET_RESTART_LABEL) == str(attempt)]
    if len(pods) == 4 and all(p.get("status", {}).get("phase") == "Running" for p in pods):
        return pods
    return None


@pytest.mark.parametrize("mode", ["Action", "Monitor"])
async def test_a_jobset_pod_with_an_xid_is_recovered_away_from_its_node(
        sim_cluster: SimCluster, sim_namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        mode: str) -> None:
    sim, ns = sim_cluster, sim_namespace
    sim.kubectl("apply", "-k", str(REPO / "crds"))
    sim.kubectl("wait", "--for=condition=Established", "crd/recoverypolicies.trainguard.dev", "--timeout=60s")
    sim.apply(POLICY.format(ns=ns, mode=mode))
    layout = (("leaders", 1, 2), ("workers", 1, 2))
    sim.create_jobset("train", ns, replicated_jobs=layout, gpus=4,
                      annotations={"trainguard.dev/policy": "gpu"})
    sim.create_jobset("other", ns, replicated_jobs=(("workers", 1, 1),), gpus=4)
    first = await until("4 running pods of attempt 0", lambda: running(sim, ns, "train", 0))
    for pod in first:
        sim.write_pod_log(ns, pod["metadata"]["name"], ["iteration 1 loss 2.0"])
    victim = next((p for p in first if p["spec"]["nodeName"] == "kwok-node-2"), first[1])
    bad = victim["spec"]["nodeName"]

    monkeypatch.setenv("KUBECONFIG", str(sim.kubeconfig))
    db = tmp_path / "audit.db"
    config = operator.OperatorConfig(
        scheduler="kubernetes", namespaces=(ns,), workload_namespace=ns, allow_action=True,
        db_url=f"sqlite+aiosqlite:///{db}", status_interval_s=0.5, poll_s=0.5)
    stop = asyncio.Event()
    running_operator = asyncio.create_task(operator.run(config, stop_flag=stop))
    wid = common.workload_id(ns, "JobSet", "train")
    try:
        await until("the WorkloadRecovery of the JobSet", lambda: sim.get("workloadrecovery", "jobset-train", ns))
        # the Xid line is printed while we watch: the operator has read each pod's first line
        await until("the first line of each pod read", lambda: lines_read(db, wid) >= len(first))
        sim.write_pod_log(ns, victim["metadata"]["name"], [XID])
        sim.fail_pod(ns, victim["metadata"]["name"], exit_code=1, reason="Error", message="GPU fell off the bus")

        store = await database.open_store(f"sqlite+aiosqlite:///{db}")
        try:
            async def outcome() -> bool:
                return bool(await store.audit_records(workload=wid, kind=vocab.AuditKind.OUTCOME))

            loop = asyncio.get_running_loop()
            deadline = loop.time() + WAIT_S
            while not await outcome():
                assert not running_operator.done(), "the operator stopped"
                assert loop.time() < deadline, "no outcome recorded"
                await asyncio.sleep(0.5)
            trail = [(r.kind.value, r.payload) for r in await store.audit_records(workload=wid)]
            [advice] = await store.audit_records(workload=wid, kind=vocab.AuditKind.ADVICE)
            assert advice.payload["action"] == "requeue" and advice.payload["exclude_nodes"] == [bad], (
                advice.payload["reasons"], trail)
        finally:
            await store.close()

        jobset = sim.get("jobset", "train", ns)
        assert jobset is not None and not jobset["spec"].get("suspend")
        assert common.RESTARTS_ANNOTATION not in (jobset["metadata"].get("annotations") or {})
        node = sim.get("node", bad)
        assert node is not None
        if mode == "Monitor":
            assert not nodes.has_our_taint(node) and not node["spec"].get("unschedulable")
            assert all(not nodes.has_our_taint(sim.get("node", n) or {}) for n in NODES)
            return
        assert nodes.has_our_taint(node) and node["spec"]["unschedulable"] is True
        # the JobSet's own failure policy restarted it; no pod of the new attempt is on the bad node
        def restarted() -> list[dict[str, Any]] | None:
            current = sim.get("jobset", "train", ns) or {}
            attempt = int((current.get("status") or {}).get("restarts") or 0)
            return running(sim, ns, "train", attempt) if attempt >= 1 else None

        again = await until("the restarted JobSet running", restarted)
        assert all(p["spec"]["nodeName"] != bad for p in again)
        for pod in again:
            sim.complete_pod(ns, pod["metadata"]["name"])

        def completed() -> bool:
            current = sim.get("jobset", "train", ns) or {}
            return (current.get("status") or {}).get("terminalState") == "Completed"

        await until("the JobSet completed", completed)
        recovery = sim.get("workloadrecovery", "jobset-train", ns) or {}
        assert recovery["metadata"]["ownerReferences"][0]["uid"] == (sim.get("jobset", "train", ns) or {})[
            "metadata"]["uid"]
    finally:
        stop.set()
        await asyncio.wait_for(running_operator, 60)
        other = sim.get("jobset", "other", ns) or {}
        assert not other.get("spec", {}).get("suspend")
        assert not [k for k in (other.get("metadata", {}).get("annotations") or {}) if k.startswith("trainguard")]
        assert sim.get("workloadrecovery", "jobset-other", ns) is None
        for name in NODES:  # leave the shared fake nodes as we found them
            obj = sim.get("node", name) or {}
            if nodes.exclusion_of(obj) is not None:
                sim.kubectl("patch", "node", name, "--type=merge", "-p", json.dumps(nodes.lift_patch(obj)))


async def test_a_hung_jobset_is_restarted_by_suspend_and_resume_after_its_own_hang_timeout(
        sim_cluster: SimCluster, sim_namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The logs stop (no pod fails, so the JobSet's own failure policy does nothing): after the
    workload's own ``hang-timeout`` (annotation ``trainguard.dev/overrides``, below the policy's
    10 min) the advice is a restart, which we make through the spec: suspend (the controller removes
    the pods), resume (new pods). It counts as one attempt and leaves nothing suspended."""
    sim, ns = sim_cluster, sim_namespace
    sim.kubectl("apply", "-k", str(REPO / "crds"))
    sim.kubectl("wait", "--for=condition=Established", "crd/recoverypolicies.trainguard.dev", "--timeout=60s")
    sim.apply(POLICY.format(ns=ns, mode="Action"))
    sim.create_jobset("train", ns, replicated_jobs=(("workers", 1, 2),), gpus=4,
                      annotations={"trainguard.dev/policy": "gpu", "trainguard.dev/overrides": "hang-timeout=10s"})

    def two_running() -> list[dict[str, Any]] | None:
        pods = pods_of(sim, ns, "train")
        return pods if len(pods) == 2 and all(p.get("status", {}).get("phase") == "Running" for p in pods) else None

    first = await until("2 running pods", two_running)
    for pod in first:
        sim.write_pod_log(ns, pod["metadata"]["name"], ["iteration 1 loss 2.0"])
    monkeypatch.setenv("KUBECONFIG", str(sim.kubeconfig))
    db = tmp_path / "audit.db"
    config = operator.OperatorConfig(
        scheduler="kubernetes", namespaces=(ns,), workload_namespace=ns, allow_action=True,
        db_url=f"sqlite+aiosqlite:///{db}", status_interval_s=0.5, poll_s=0.5)
    stop = asyncio.Event()
    running_operator = asyncio.create_task(operator.run(config, stop_flag=stop))
    wid = common.workload_id(ns, "JobSet", "train")
    try:
        await until("the WorkloadRecovery", lambda: sim.get("workloadrecovery", "jobset-train", ns))
        for pod in first:
            sim.write_pod_log(ns, pod["metadata"]["name"], ["iteration 2 loss 1.9"])  # then silence
        store = await database.open_store(f"sqlite+aiosqlite:///{db}")
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + WAIT_S
            while not await store.audit_records(workload=wid, kind=vocab.AuditKind.OUTCOME):
                assert not running_operator.done(), "the operator stopped"
                assert loop.time() < deadline, "no outcome recorded"
                await asyncio.sleep(0.5)
            trail = [(r.kind.value, r.payload) for r in await store.audit_records(workload=wid)]
            [anomaly] = await store.audit_records(workload=wid, kind=vocab.AuditKind.ANOMALY)
            assert anomaly.payload["symptom"] == "hang", trail
            [outcome] = await store.audit_records(workload=wid, kind=vocab.AuditKind.OUTCOME)
            assert outcome.payload.get("disposition") == "Converged", trail
        finally:
            await store.close()
        jobset = sim.get("jobset", "train", ns) or {}
        assert not jobset["spec"].get("suspend")
        assert jobset["metadata"]["annotations"].get(common.RESTARTS_ANNOTATION) == "1"
        assert common.SUSPENDED_BY_ANNOTATION not in jobset["metadata"]["annotations"]
        old = {p["metadata"]["uid"] for p in first}
        def replaced() -> list[dict[str, Any]] | None:
            pods = two_running()
            return pods if pods and not {p["metadata"]["uid"] for p in pods} & old else None

        again = await until("2 new running pods", replaced)
        assert len(again) == 2
    finally:
        stop.set()
        await asyncio.wait_for(running_operator, 60)
