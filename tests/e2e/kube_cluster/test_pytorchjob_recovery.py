"""End to end on the simulated cluster with the real Kubeflow training-operator: a PyTorchJob
(Master + 2 Workers, 4 GPUs each, ``restartPolicy: ExitCode``) opted in with
``trainguard.dev/policy``. A Worker prints an Xid 79 line and is killed (exit 137, retryable).
Action: its node is cordoned and tainted by us, every pod ends up running away from it, and the job
succeeds once its pods complete. Monitor: the advice is recorded and nothing is changed.

The training-operator re-creates the killed Worker under the same name: that is the job's one
restart. The adapter counts it as an attempt, so the executor only excludes the node and never
suspends/resumes the job on top of it (no ``trainguard.dev/restarts``, never suspended). The Xid
alone is a hardware verdict on a running job, so our restart may also come first and take the pods
away before the kill lands: then it is the one restart (``trainguard.dev/restarts: 1``), and the
kill, if it lands on a pod our suspend is taking away, adds no second.
The adapter's side of each order is proven deterministically in ``tests/integration/kube/test_kubejobs.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.kube_cluster.harness import POLICY, XID, install, lines_read, operator_running, printed_and_read, until
from tests.support.kube_cluster import PYTORCHJOB_NAME_LABEL, SimCluster
from trainguard.k8s.kubejobs import common, nodes
from trainguard.model import vocab

pytestmark = [pytest.mark.e2e, pytest.mark.kube, pytest.mark.kube_cluster, pytest.mark.timeout(600)]


def live_pods(sim: SimCluster, ns: str) -> list[dict[str, Any]] | None:
    pods = [p for p in sim.pods(ns, f"{PYTORCHJOB_NAME_LABEL}=ptj") if not p["metadata"].get("deletionTimestamp")]
    if len(pods) == 3 and all(p.get("status", {}).get("phase") == "Running" for p in pods):
        return pods
    return None


@pytest.mark.parametrize("mode", ["Action", "Monitor"])
async def test_a_pytorchjob_worker_with_an_xid_is_recovered_away_from_its_node(
        sim_cluster: SimCluster, sim_namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        mode: str) -> None:
    sim, ns = sim_cluster, sim_namespace
    install(sim, POLICY.format(ns=ns, mode=mode))
    sim.create_pytorchjob("ptj", ns, workers=2, gpus=4, annotations={"trainguard.dev/policy": "gpu"})
    first = await until("3 running pods", lambda: live_pods(sim, ns))
    for pod in first:
        sim.write_pod_log(ns, pod["metadata"]["name"], ["iteration 1 loss 2.0"])
    victim = next(p for p in first if p["metadata"]["name"].endswith("worker-1"))
    bad = victim["spec"]["nodeName"]
    wid = common.workload_id(ns, "PyTorchJob", "ptj")

    async with operator_running(sim, ns, tmp_path, monkeypatch) as op:
        await until("the WorkloadRecovery", lambda: sim.get("workloadrecovery", "pytorchjob-ptj", ns))
        # The Xid line is printed while we watch: the operator has read each pod's first line. The
        # training-operator re-creates the failed Worker under its own name within a second; a line
        # printed just before that, by a pod whose log we were not yet following, belongs to an
        # attempt already over when we first look (as on a real node, where the old pod's log goes
        # with it).
        await until("the first line of each pod read", lambda: lines_read(op.db, wid) >= len(first))
        await printed_and_read(sim, ns, victim["metadata"]["name"], [XID], op.db, wid)
        try:
            sim.fail_pod(ns, victim["metadata"]["name"], exit_code=137, reason="Error", message="killed",
                         uid=victim["metadata"]["uid"])
        except RuntimeError as exc:
            # Action: the Xid alone is a hardware verdict on a running job, and our restart may take
            # the pod away before the kill lands (on a real node too: the driver's line comes first).
            now = sim.get("pod", victim["metadata"]["name"], ns)
            assert mode == "Action" and (now is None or now["metadata"]["uid"] != victim["metadata"]["uid"]), exc
        recorded = await op.recovery(wid)
        advice = recorded.one(vocab.AuditKind.ADVICE)
        # The re-created Worker may already run elsewhere when the advice is made: the failed
        # attempt's node is still the one to exclude.
        assert advice.payload["action"] == "requeue" and advice.payload["exclude_nodes"] == [bad], (
            advice.payload["reasons"], recorded.trail)
        node = sim.get("node", bad) or {}
        job = sim.get("pytorchjob", "ptj", ns) or {}
        if mode == "Monitor":
            assert not nodes.has_our_taint(node) and not node["spec"].get("unschedulable")
            assert not (job["spec"].get("runPolicy") or {}).get("suspend")
            return
        assert nodes.has_our_taint(node) and node["spec"]["unschedulable"] is True
        notes = job["metadata"].get("annotations") or {}
        # One restart, whoever made it: the training-operator's re-creation of the killed Worker (the
        # usual order: no suspend of ours on top of it), or ours when it came before the kill.
        assert notes.get(common.RESTARTS_ANNOTATION) in (None, "1"), recorded.trail
        assert common.SUSPENDED_BY_ANNOTATION not in notes, recorded.trail
        assert not (job["spec"].get("runPolicy") or {}).get("suspend"), recorded.trail

        def moved() -> list[dict[str, Any]] | None:
            pods = live_pods(sim, ns)
            return pods if pods and all(p["spec"]["nodeName"] != bad for p in pods) else None

        again = await until("every pod running away from the bad node", moved)
        for pod in again:
            sim.complete_pod(ns, pod["metadata"]["name"])

        def succeeded() -> bool:
            job = sim.get("pytorchjob", "ptj", ns) or {}
            return any(c.get("type") == "Succeeded" and c.get("status") == "True"
                       for c in (job.get("status") or {}).get("conditions") or [])

        await until("the PyTorchJob succeeded", succeeded)
        # The kill's ending line, however late our pod-log watch saw it, is the failed attempt's:
        # never judged as the re-created one's (which would advise a stop of a job that succeeds).
        after = await op.recovery(wid)
        assert [(r.attempt, r.payload["action"]) for r in after.records if r.kind == vocab.AuditKind.ADVICE] == [
            (0, "requeue")], after.trail
