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

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.kube_cluster.harness import (
    POLICY,
    XID,
    completed,
    install,
    lines_read,
    operator_running,
    pods_of,
    restarted,
    running,
    until,
)
from tests.support.kube_cluster import NODES, SimCluster
from trainguard.k8s.kubejobs import common, nodes
from trainguard.model import vocab

pytestmark = [pytest.mark.e2e, pytest.mark.kube, pytest.mark.kube_cluster, pytest.mark.timeout(600)]


@pytest.mark.parametrize("mode", ["Action", "Monitor"])
async def test_a_jobset_pod_with_an_xid_is_recovered_away_from_its_node(
        sim_cluster: SimCluster, sim_namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        mode: str) -> None:
    sim, ns = sim_cluster, sim_namespace
    install(sim, POLICY.format(ns=ns, mode=mode))
    layout = (("leaders", 1, 2), ("workers", 1, 2))
    sim.create_jobset("train", ns, replicated_jobs=layout, gpus=4,
                      annotations={"trainguard.dev/policy": "gpu"})
    sim.create_jobset("other", ns, replicated_jobs=(("workers", 1, 1),), gpus=4)
    first = await until("4 running pods of attempt 0", lambda: running(sim, ns, "train", 0))
    for pod in first:
        sim.write_pod_log(ns, pod["metadata"]["name"], ["iteration 1 loss 2.0"])
    victim = next((p for p in first if p["spec"]["nodeName"] == "kwok-node-2"), first[1])
    bad = victim["spec"]["nodeName"]
    wid = common.workload_id(ns, "JobSet", "train")

    async with operator_running(sim, ns, tmp_path, monkeypatch) as op:
        await until("the WorkloadRecovery of the JobSet", lambda: sim.get("workloadrecovery", "jobset-train", ns))
        # the Xid line is printed while we watch: the operator has read each pod's first line
        await until("the first line of each pod read", lambda: lines_read(op.db, wid) >= len(first))
        sim.write_pod_log(ns, victim["metadata"]["name"], [XID])
        sim.fail_pod(ns, victim["metadata"]["name"], exit_code=1, reason="Error", message="GPU fell off the bus")
        recorded = await op.recovery(wid)
        advice = recorded.one(vocab.AuditKind.ADVICE)
        assert advice.payload["action"] == "requeue" and advice.payload["exclude_nodes"] == [bad], (
            advice.payload["reasons"], recorded.trail)

        jobset = sim.get("jobset", "train", ns)
        assert jobset is not None and not jobset["spec"].get("suspend")
        assert common.RESTARTS_ANNOTATION not in (jobset["metadata"].get("annotations") or {})
        node = sim.get("node", bad)
        assert node is not None
        if mode == "Monitor":
            assert not nodes.has_our_taint(node) and not node["spec"].get("unschedulable")
            assert all(not nodes.has_our_taint(sim.get("node", n) or {}) for n in NODES)
        else:
            assert nodes.has_our_taint(node) and node["spec"]["unschedulable"] is True
            # the JobSet's own failure policy restarted it; no pod of the new attempt is on the bad node
            again = await until("the restarted JobSet running", lambda: restarted(sim, ns, "train"))
            assert all(p["spec"]["nodeName"] != bad for p in again)
            for pod in again:
                sim.complete_pod(ns, pod["metadata"]["name"])

            await until("the JobSet completed", lambda: completed(sim, ns, "train"))
            recovery = sim.get("workloadrecovery", "jobset-train", ns) or {}
            assert recovery["metadata"]["ownerReferences"][0]["uid"] == (sim.get("jobset", "train", ns) or {})[
                "metadata"]["uid"]
    other = sim.get("jobset", "other", ns) or {}
    assert not other.get("spec", {}).get("suspend")
    assert not [k for k in (other.get("metadata", {}).get("annotations") or {}) if k.startswith("trainguard")]
    assert sim.get("workloadrecovery", "jobset-other", ns) is None


async def test_a_hung_jobset_is_restarted_by_suspend_and_resume_after_its_own_hang_timeout(
        sim_cluster: SimCluster, sim_namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The logs stop (no pod fails, so the JobSet's own failure policy does nothing): after the
    workload's own ``hang-timeout`` (annotation ``trainguard.dev/overrides``, below the policy's
    10 min) the advice is a restart, which we make through the spec: suspend (the controller removes
    the pods), resume (new pods). It counts as one attempt and leaves nothing suspended."""
    sim, ns = sim_cluster, sim_namespace
    install(sim, POLICY.format(ns=ns, mode="Action"))
    sim.create_jobset("train", ns, replicated_jobs=(("workers", 1, 2),), gpus=4,
                      annotations={"trainguard.dev/policy": "gpu", "trainguard.dev/overrides": "hang-timeout=10s"})

    def two_running() -> list[dict[str, Any]] | None:
        pods = pods_of(sim, ns, "train")
        return pods if len(pods) == 2 and all(p.get("status", {}).get("phase") == "Running" for p in pods) else None

    first = await until("2 running pods", two_running)
    for pod in first:
        sim.write_pod_log(ns, pod["metadata"]["name"], ["iteration 1 loss 2.0"])
    wid = common.workload_id(ns, "JobSet", "train")
    async with operator_running(sim, ns, tmp_path, monkeypatch) as op:
        await until("the WorkloadRecovery", lambda: sim.get("workloadrecovery", "jobset-train", ns))
        for pod in first:
            sim.write_pod_log(ns, pod["metadata"]["name"], ["iteration 2 loss 1.9"])  # then silence
        recorded = await op.recovery(wid)
        assert recorded.one(vocab.AuditKind.ANOMALY).payload["symptom"] == "hang", recorded.trail
        assert recorded.one(vocab.AuditKind.OUTCOME).payload.get("disposition") == "Converged", recorded.trail
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
