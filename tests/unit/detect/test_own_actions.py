"""``detect.own_actions.effect_of``: our own requeue's teardown is its effect; anything else stays a failure.

The end-to-end proof on real Slurm is tests/e2e/adversarial/test_own_actions.py; these cases pin the
rule's edges with the lines Slurm 22.05 prints when ``scontrol requeue`` hits a running job.
"""

from __future__ import annotations

import pytest

from trainguard.detect import own_actions
from trainguard.model import actions, anomalies, vocab

C = vocab.Category
WORKLOAD = "slurm/local/12"
REQUEUED_AT = 1_700_000_100.0

STEP_CANCELLED = "slurmstepd: error: *** STEP 12.0 ON node1 CANCELLED AT 2026-12-01T13:40:02 DUE TO JOB REQUEUE ***"
TASK_TERMINATED = "srun: error: node2: task 1: Terminated"
XID = "Dec  1 13:40:02 node2 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, GPU has fallen off the bus."


def crash(text: str, category: vocab.Category, *, at: float, pattern: str = "slurm.cancelled") -> anomalies.Anomaly:
    evidence = anomalies.Evidence(line=90, text=text, pattern=pattern, at=at, node="node1", category=category,
                                  severity=vocab.Severity.FATAL)
    return anomalies.Anomaly(symptom=vocab.Symptom.CRASH, category=category, evidence=[evidence],
                             suspect_nodes=["node1"], first_seen_at=at, detected_at=at + 1.0, summary=text)


def ours(operation: actions.Operation = actions.Operation.REQUEUE, *, attempt: int = 0,
         status: actions.ActionStatus = actions.ActionStatus.DONE) -> actions.ActionRecord:
    return actions.ActionRecord(workload=WORKLOAD, attempt=attempt, generation=1, step=operation.value,
                                operation=operation, status=status, created_at=REQUEUED_AT)


@pytest.mark.parametrize("operation", list(own_actions.TERMINATING))
@pytest.mark.parametrize("text", [STEP_CANCELLED, TASK_TERMINATED])
def test_teardown_after_our_terminating_action_is_its_effect(operation: actions.Operation, text: str) -> None:
    row = ours(operation)
    anomaly = crash(text, C.PROCESS_SIGNAL_KILLED, at=REQUEUED_AT + 2.0)
    assert own_actions.effect_of(anomaly, workload=WORKLOAD, attempt=0, ours=[row]) == row
    payload = own_actions.effect_payload(anomaly, row, "requeue")
    assert (payload["status"], payload["operation"], payload["generation"]) == ("effect", operation.value, 1)


@pytest.mark.parametrize(
    ("anomaly", "rows"),
    [
        # Monitor mode: the action row says skipped, nothing was done, so the kill is someone else's.
        (crash(STEP_CANCELLED, C.PROCESS_SIGNAL_KILLED, at=REQUEUED_AT + 2),
         [ours(status=actions.ActionStatus.SKIPPED)]),
        # Our requeue was of the previous attempt; this one was killed by something else.
        (crash(TASK_TERMINATED, C.PROCESS_SIGNAL_KILLED, at=REQUEUED_AT + 2), [ours(attempt=1)]),
        # Read before we acted: it is why we acted, or unrelated, never our effect.
        (crash(TASK_TERMINATED, C.PROCESS_SIGNAL_KILLED, at=REQUEUED_AT - 5), [ours()]),
        # Hardware evidence printed during the teardown is still news about the node.
        (crash(XID, C.GPU_FALLEN_OFF_BUS, at=REQUEUED_AT + 2, pattern="xid.79_fallen_off_bus"), [ours()]),
        # Draining a node or holding a job does not terminate tasks.
        (crash(STEP_CANCELLED, C.PROCESS_SIGNAL_KILLED, at=REQUEUED_AT + 2),
         [ours(actions.Operation.DRAIN_NODE), ours(actions.Operation.HOLD)]),
    ],
    ids=["monitor-mode", "other-attempt", "before-our-action", "hardware", "not-terminating"],
)
def test_anything_else_stays_a_failure(anomaly: anomalies.Anomaly, rows: list[actions.ActionRecord]) -> None:
    assert own_actions.effect_of(anomaly, workload=WORKLOAD, attempt=0, ours=rows) is None


def test_a_hang_is_never_an_effect() -> None:
    hang = crash(TASK_TERMINATED, C.PROGRESS_STALLED, at=REQUEUED_AT + 2).model_copy(
        update={"symptom": vocab.Symptom.HANG})
    assert own_actions.effect_of(hang, workload=WORKLOAD, attempt=0, ours=[ours()]) is None


@pytest.mark.parametrize("operation", [actions.Operation.REQUEUE, actions.Operation.REQUEUE_HOLD])
def test_our_requeue_teardown_line_read_as_the_next_attempt_is_still_our_effect(operation: actions.Operation) -> None:
    # slurmstepd wrote it after the engine last looked at the pending job's file, so reading the next
    # attempt starts before it; the line names the requeue itself.
    row = ours(operation, attempt=0)
    anomaly = crash(STEP_CANCELLED, C.PROCESS_SIGNAL_KILLED, at=REQUEUED_AT + 20.0)
    assert own_actions.effect_of(anomaly, workload=WORKLOAD, attempt=1, ours=[row]) == row


def test_only_the_requeue_line_itself_crosses_into_the_next_attempt() -> None:
    # Another kill line in the next attempt is a failure of that attempt (a kill -9 of a rank), as is
    # a requeue line when our action on the previous attempt was a cancel (no next attempt from us).
    terminated = crash(TASK_TERMINATED, C.PROCESS_SIGNAL_KILLED, at=REQUEUED_AT + 20.0)
    assert own_actions.effect_of(terminated, workload=WORKLOAD, attempt=1, ours=[ours(attempt=0)]) is None
    cancelled = crash(STEP_CANCELLED, C.PROCESS_SIGNAL_KILLED, at=REQUEUED_AT + 20.0)
    assert own_actions.effect_of(cancelled, workload=WORKLOAD, attempt=1,
                                 ours=[ours(actions.Operation.CANCEL, attempt=0)]) is None
    assert own_actions.effect_of(cancelled, workload=WORKLOAD, attempt=2, ours=[ours(attempt=0)]) is None


POD_KILLED = ("trainguard: pod ptj-worker-1 container pytorch on kwok-node-2 ended: reason=Error exitCode=137 "
              "signal=SIGKILL")


def held(*, hold_seen: bool = True) -> actions.ActionRecord:
    """Our restart of attempt 0 that held the job (a suspend of ours the scheduler showed)."""
    args = {actions.HOLD_SEEN: {"reason": "Suspended", "detail": "trainguard: restart"}} if hold_seen else {}
    return actions.ActionRecord(workload=WORKLOAD, attempt=0, generation=1, step="requeue_hold",
                                operation=actions.Operation.REQUEUE_HOLD, args=args, status=actions.ActionStatus.DONE,
                                created_at=REQUEUED_AT, updated_at=REQUEUED_AT + 1.0)


def released(at: float) -> actions.ActionRecord:
    return actions.ActionRecord(workload=WORKLOAD, attempt=0, generation=1, step="release",
                                operation=actions.Operation.RELEASE, status=actions.ActionStatus.DONE,
                                created_at=at - 0.1, updated_at=at)


def test_a_kill_seen_while_our_restart_held_the_job_is_its_effect_in_the_next_attempt() -> None:
    """A pod our suspend takes away, killed on its way out: its ending line is read once the next
    attempt began, but it was seen before our release, when no task of the next attempt could run."""
    killed = crash(POD_KILLED, C.PROCESS_SIGNAL_KILLED, at=REQUEUED_AT + 0.5, pattern="k8s.container_killed")
    assert own_actions.effect_of(killed, workload=WORKLOAD, attempt=1, ours=[held()]) == held()
    assert own_actions.effect_of(killed, workload=WORKLOAD, attempt=1,
                                 ours=[held(), released(REQUEUED_AT + 1.5)]) == held()


@pytest.mark.parametrize(
    ("at", "rows"),
    [
        # seen after our release: the next attempt's pods may run, so it may be theirs
        (REQUEUED_AT + 2.0, [held(), released(REQUEUED_AT + 1.5)]),
        # the step placed no hold (the workload's own failure policy restarted it): no window of ours
        (REQUEUED_AT + 0.5, [held(hold_seen=False)]),
        # seen before our restart began: why we acted, or unrelated
        (REQUEUED_AT - 1.0, [held()]),
    ],
    ids=["after-our-release", "no-hold-placed", "before-our-restart"],
)
def test_a_kill_outside_our_hold_stays_a_failure_of_the_next_attempt(at: float,
                                                                     rows: list[actions.ActionRecord]) -> None:
    killed = crash(POD_KILLED, C.PROCESS_SIGNAL_KILLED, at=at, pattern="k8s.container_killed")
    assert own_actions.effect_of(killed, workload=WORKLOAD, attempt=1, ours=rows) is None
    assert own_actions.effect_of(killed, workload=WORKLOAD, attempt=2, ours=rows) is None
