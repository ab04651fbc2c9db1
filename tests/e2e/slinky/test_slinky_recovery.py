"""End to end on Slurm on Kubernetes for real: ``trainguard operator`` drives SchedMD's slurm-operator
v1.0.1 on Slurm 26.05 (``hack/local-kube.sh up --cluster --slinky``; nothing made by hand).

``kubectl apply`` of a RecoveryPolicy; an opted-in Slurm job on the NodeSet's three nodes; the task on
one of them prints an Xid 79 line naming its node and fails (a 2-node job on the NodeSet's three:
``harness``).

- Action: the operator records the advice (requeue without the node, take it out of service), cordons
  that node's Kubernetes node with our reason (an executor step, intent first), slurm-operator drains
  the Slurm node with ``slurm-operator: trainguard: ...``, the job is requeued without it and
  completes on the two others; ``kubectl get recoveries`` shows it. The undo (``POST
  /api/v1/nodes/NODE/undo-drain``) uncordons, and slurm-operator returns the node to service.
- Monitor (the twin): the same advice is recorded, and nothing changes: no cordon, no drain, no
  requeue (the job stays failed).
"""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.e2e.slinky import harness as h
from tests.support import slinky as sl
from trainguard.k8s import slinky, status
from trainguard.model import actions, vocab
from trainguard.store import audit, database

pytestmark = [pytest.mark.e2e, pytest.mark.kube, pytest.mark.kube_cluster, pytest.mark.slinky,
              pytest.mark.timeout(900)]


def records(scene: h.Scene, workload: str, kind: vocab.AuditKind | None = None) -> list[audit.AuditRecord]:
    """The workload's audit records (none while the operator has not created its database yet)."""
    async def read() -> list[audit.AuditRecord]:
        try:
            store = await database.open_store(scene.db_url, readonly=True)
        except database.StoreNotFound:
            return []
        try:
            return list(await store.audit_records(workload=workload, kind=kind))
        finally:
            await store.close()
    return asyncio.run(read())


def action_rows(scene: h.Scene, operation: actions.Operation) -> list[actions.ActionRecord]:
    """The action rows of ``operation`` on the lemon node."""
    async def read() -> list[actions.ActionRecord]:
        try:
            store = await database.open_store(scene.db_url, readonly=True)
        except database.StoreNotFound:
            return []
        try:
            return [r for r in await store.actions_by_operation([operation]) if r.args.get("node") == scene.lemon]
        finally:
            await store.close()
    return asyncio.run(read())


def trail(scene: h.Scene, workload: str) -> list[tuple[str, object]]:
    return [(r.kind.value, r.payload) for r in records(scene, workload)]


def node_events(scene: h.Scene, workload: str) -> dict[str, str]:
    """Reason -> message of the node Events on the workload's WorkloadRecovery."""
    listed = json.loads(scene.cluster.kubectl("get", "events", "-n", scene.namespace, "--field-selector",
                                              f"involvedObject.name={status.object_name(workload)}", "-o", "json"))
    return {e["reason"]: e["message"] for e in listed["items"] if e["reason"] in ("NodeOutOfService", "NodeReturned")}


def recovery_row(scene: h.Scene, workload: str) -> list[str]:
    """The workload's row of ``kubectl get recoveries`` (NAME WORKLOAD PHASE ATTEMPT LAST-ANOMALY VERDICT
    ADVICE MODE ...), once it shows the anomaly and the phase has settled."""
    name = status.object_name(workload)

    def row() -> list[str] | None:
        lines = scene.cluster.kubectl("get", "recoveries", "-n", scene.namespace).splitlines()
        cells = next((line.split() for line in lines[1:] if line.split()[0] == name), None)
        return cells if cells and cells[2] in ("Succeeded", "Failed") and len(cells) > 7 else None
    return h.wait(f"{name} in kubectl get recoveries", row, diagnose=scene.diagnose)


def the_advice(scene: h.Scene, workload: str) -> audit.AuditRecord:
    [advice] = h.wait("the advice", lambda: records(scene, workload, vocab.AuditKind.ADVICE),
                      diagnose=scene.diagnose)
    return advice


def test_an_xid_on_a_nodeset_node_is_cordoned_drained_by_slurm_operator_requeued_and_undone(
        scene: h.Scene) -> None:
    cluster = scene.cluster
    h.apply_policy(scene, "Action")
    operator = scene.operator()
    operator.start()
    job_id, workload, lemon = scene.start_job("xid")
    others = [n for n in sl.SLURM_NODES if n != lemon]

    advice = the_advice(scene, workload).payload
    assert advice["mode"] == "Action" and advice["action"] == "requeue", advice["reasons"]
    assert advice["exclude_nodes"] == [lemon] and advice["drain_nodes"] == [lemon], advice["reasons"]
    assert advice["drain_in_scheduler"], advice["reasons"]

    # our cordon: the executor's drain step, intent before the write, with Slinky's reason annotation
    h.wait("the executor's cordon step done", lambda: any(
        r.status is actions.ActionStatus.DONE for r in action_rows(scene, actions.Operation.DRAIN_NODE)),
        diagnose=scene.diagnose)
    steps = [(r.payload.get("step"), r.payload.get("status")) for r in records(scene, workload, vocab.AuditKind.ACTION)]
    drain = f"drain_node:{lemon}"
    assert steps.index((drain, "intent")) < steps.index((drain, "done")), steps
    node = scene.kube_node()
    reason = node["metadata"]["annotations"][slinky.CORDON_REASON_ANNOTATION]
    assert node["spec"]["unschedulable"] is True and reason.startswith("trainguard:") and lemon in reason, node
    # slurm-operator drains the Slurm node with our reason
    drained = h.wait(f"slurm-operator to drain {lemon}", scene.drained_by_slurm_operator, diagnose=scene.diagnose)
    assert drained["Reason"].startswith(f"slurm-operator: {reason}"), drained
    for other in others:
        assert "DRAIN" not in cluster.slurm_node(other)["State"], cluster.slurm_node(other)

    # requeued without it; completes on the two others
    job = h.wait("the requeued job to finish", lambda: scene.final(job_id), diagnose=scene.diagnose)
    assert job["JobState"] == "COMPLETED" and job["Restarts"] == "1", (job, trail(scene, workload))
    assert lemon in job["ExcNodeList"] and lemon not in job["NodeList"], job
    assert scene.attempts(job_id)[1:] == [others], scene.attempts(job_id)
    outcome = h.wait("the outcome", lambda: records(scene, workload, vocab.AuditKind.OUTCOME), diagnose=scene.diagnose)
    assert outcome[0].payload.get("disposition") == "Converged", trail(scene, workload)

    # kubectl get recoveries shows it
    row = recovery_row(scene, workload)
    assert row[1] == job_id and row[2] == "Succeeded" and row[4:7] == ["gpu_fallen_off_bus", "hardware", "requeue"], row
    assert row[7] == "Action", row

    # the undo: uncordon; slurm-operator returns the Slurm node to service
    code, body = scene.post(operator, f"/api/v1/nodes/{lemon}/undo-drain")
    assert code == 200 and body["ok"], (code, body, scene.diagnose())
    assert h.uncordoned(scene.kube_node()), scene.kube_node()
    back = h.wait(f"slurm-operator to return {lemon} to service", scene.in_service, diagnose=scene.diagnose)
    assert not back.get("Reason") or back["Reason"] == "(null)", back
    [resume] = action_rows(scene, actions.Operation.RESUME_NODE)
    assert resume.status is actions.ActionStatus.DONE and resume.args.get("requested_by"), resume
    # ... and Kubernetes Events say so, on the workload's WorkloadRecovery
    def both() -> dict[str, str] | None:
        found = node_events(scene, workload)
        return found if len(found) == 2 else None
    events = h.wait("the NodeOutOfService and NodeReturned Events", both, diagnose=scene.diagnose)
    assert all(lemon in message for message in events.values()), events
    assert operator.alive(), scene.diagnose()


def test_the_monitor_mode_twin_records_the_same_advice_and_changes_nothing(scene: h.Scene) -> None:
    cluster = scene.cluster
    h.apply_policy(scene, "Monitor")
    operator = scene.operator()
    operator.start()
    job_id, workload, lemon = scene.start_job("xid-monitor")

    advice = the_advice(scene, workload).payload
    assert advice["mode"] == "Monitor" and advice["action"] == "requeue", advice["reasons"]
    assert advice["exclude_nodes"] == [lemon] and advice["drain_nodes"] == [lemon], advice["reasons"]
    job = h.wait("the failed job", lambda: scene.final(job_id), diagnose=scene.diagnose)
    h.wait("the outcome", lambda: records(scene, workload, vocab.AuditKind.OUTCOME), diagnose=scene.diagnose)
    assert job["JobState"] == "FAILED" and job["Restarts"] == "0", job
    assert job["ExcNodeList"] == "(null)", job
    assert len(scene.attempts(job_id)) == 1, scene.attempts(job_id)
    row = recovery_row(scene, workload)
    assert row[1] == job_id and row[2] == "Failed" and row[4:8] == ["gpu_fallen_off_bus", "hardware", "requeue",
                                                                    "Monitor"], row
    done = [r for r in records(scene, workload, vocab.AuditKind.ACTION)
            if r.payload.get("status") in ("intent", "done")]
    assert not done, trail(scene, workload)
    cordon = action_rows(scene, actions.Operation.DRAIN_NODE)
    assert [r.status for r in cordon] == [actions.ActionStatus.SKIPPED], trail(scene, workload)  # would cordon
    assert h.uncordoned(scene.kube_node()), scene.kube_node()
    for name in sl.SLURM_NODES:
        assert "DRAIN" not in cluster.slurm_node(name)["State"], cluster.slurm_node(name)
    assert operator.alive(), scene.diagnose()
