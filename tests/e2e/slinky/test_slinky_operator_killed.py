"""End to end on slurm-operator v1.0.1 and Slurm 26.05: ``trainguard operator`` is killed with SIGKILL
between the intent of its cordon and the cordon's write, and a new one ends with exactly one cordon.

The write is held in the real kube-apiserver by a validating admission webhook (``gate``) that
matches only the operator's cordon of a Node. Once the first operator's cordon is held there, the
test checks that the audit store has its intent and not its completion, kills the operator with
SIGKILL and lets the held write be refused: the node is not cordoned. A new operator on the same audit
database resumes the step from its intent row: one cordon write (the gate admits and counts it), our
reason on the node, slurm-operator's drain of the Slurm node, one requeue of the job, which
completes on the other two nodes.
"""

from __future__ import annotations

import os
import signal

import pytest

from tests.e2e.slinky import gate as gate_mod
from tests.e2e.slinky import harness as h
from tests.e2e.slinky.test_slinky_recovery import action_rows, records, trail
from tests.support import slinky as sl
from trainguard.k8s import slinky
from trainguard.model import actions, vocab

pytestmark = [pytest.mark.e2e, pytest.mark.kube, pytest.mark.kube_cluster, pytest.mark.slinky,
              pytest.mark.timeout(900)]


def test_the_operator_killed_between_its_cordon_intent_and_the_write_cordons_exactly_once(
        scene: h.Scene) -> None:
    cluster = scene.cluster
    h.apply_policy(scene, "Action")
    with gate_mod.CordonGate(scene.home, h.OPERATOR_USER) as gate, gate_mod.installed(
            cluster, gate, cluster.kube_node_of(sl.SLURM_NODES[0])):
        killed = scene.operator("killed")
        killed.start()
        job_id, workload, lemon = scene.start_job("xid-killed")
        others = [n for n in sl.SLURM_NODES if n != lemon]

        assert gate.reached.wait(h.WAIT_S), f"the cordon write never reached the apiserver\n{scene.diagnose()}"
        drain = f"drain_node:{lemon}"
        rows = action_rows(scene, actions.Operation.DRAIN_NODE)
        assert [(r.step, r.status) for r in rows] == [(drain, actions.ActionStatus.INTENT)], trail(scene, workload)
        os.kill(killed.pid, signal.SIGKILL)
        assert killed.proc is not None and killed.proc.wait(timeout=30) == -signal.SIGKILL
        gate.release()  # the held write is refused: its writer is gone
        assert gate.held == [cluster.kube_node_of(lemon)], gate.held
        assert h.uncordoned(scene.kube_node()), scene.kube_node()
        assert not records(scene, workload, vocab.AuditKind.OUTCOME), trail(scene, workload)  # mid-recovery

        again = scene.operator("again")
        again.start()
        h.wait("the cordon step done by the new operator", lambda: any(
            r.status is actions.ActionStatus.DONE for r in action_rows(scene, actions.Operation.DRAIN_NODE)),
            diagnose=scene.diagnose)
        drained = h.wait(f"slurm-operator to drain {lemon}", scene.drained_by_slurm_operator, diagnose=scene.diagnose)
        job = h.wait("the requeued job to finish", lambda: scene.final(job_id), diagnose=scene.diagnose)
        h.wait("the outcome", lambda: records(scene, workload, vocab.AuditKind.OUTCOME), diagnose=scene.diagnose)
        admitted = list(gate.admitted)

    # exactly one cordon: one write admitted, our reason on the node, one drain step carried out
    assert admitted == [cluster.kube_node_of(lemon)], admitted
    node = scene.kube_node()
    reason = node["metadata"]["annotations"][slinky.CORDON_REASON_ANNOTATION]
    assert node["spec"]["unschedulable"] is True and reason.startswith("trainguard:"), node
    assert drained["Reason"].startswith(f"slurm-operator: {reason}"), drained
    steps = [(r.payload.get("step"), r.payload.get("status")) for r in records(scene, workload, vocab.AuditKind.ACTION)]
    assert steps.count((drain, "intent")) >= 1 and steps.count((drain, "done")) == 1, steps
    done = [step for step, state in steps if state == "done"]
    assert all(done.count(step) == 1 for step in done), steps
    # the job: requeued once, without the node, completed on the two others
    assert job["JobState"] == "COMPLETED" and job["Restarts"] == "1", (job, trail(scene, workload))
    assert lemon in job["ExcNodeList"] and scene.attempts(job_id)[1:] == [others], (job, scene.attempts(job_id))
    assert again.alive(), scene.diagnose()
