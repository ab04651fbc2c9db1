"""``act.whose``: whose change ended or changed a job, from a fresh read and our own action rows."""

from __future__ import annotations

from trainguard.act import whose
from trainguard.model import actions, workloads

S = workloads.JobState
W = "slurm/test/7"


def job(state: S = S.RUNNING, attempt: int = 0, **fields: object) -> workloads.JobSnapshot:
    return workloads.JobSnapshot(workload=W, job_id="7", state=state, attempt=attempt, **fields)  # type: ignore[arg-type]


def row(operation: actions.Operation, *, attempt: int = 0, status: actions.ActionStatus = actions.ActionStatus.DONE,
        **args: object) -> actions.ActionRecord:
    return actions.ActionRecord(workload=W, attempt=attempt, generation=1, step=operation.value, operation=operation,
                                args={"job_id": "7", **args}, status=status)


def test_a_cancel_that_is_not_ours_is_a_persons_decision() -> None:
    change = whose.ending(job(S.CANCELLED), 0, [])
    assert change is not None and (change.who, change.what) == ("person", "cancelled")


def test_our_own_cancel_is_ours_and_a_monitor_mode_skip_is_not() -> None:
    assert whose.ending(job(S.CANCELLED), 0, [row(actions.Operation.CANCEL)]) is None
    skipped = row(actions.Operation.CANCEL, status=actions.ActionStatus.SKIPPED)
    assert whose.ending(job(S.CANCELLED), 0, [skipped]) is not None


def test_the_schedulers_endings_are_its_own() -> None:
    for state, what in ((S.TIMEOUT, "time-limit"), (S.PREEMPTED, "preempted"), (S.DEADLINE, "deadline")):
        change = whose.ending(job(state), 0, [])
        assert change is not None and (change.who, change.what) == ("scheduler", what)


def test_failures_are_the_workloads() -> None:
    for state in (S.FAILED, S.NODE_FAIL, S.OUT_OF_MEMORY, S.BOOT_FAIL, S.RUNNING, S.COMPLETING):
        assert whose.ending(job(state), 0, []) is None


def test_a_requeue_without_one_of_ours_is_someone_elses_and_ours_is_not() -> None:
    change = whose.ending(job(S.PENDING, attempt=1), 0, [])
    assert change is not None and change.what == "requeued"
    assert whose.ending(job(S.PENDING, attempt=1), 0, [row(actions.Operation.REQUEUE_HOLD)]) is None
    intent = row(actions.Operation.REQUEUE, status=actions.ActionStatus.INTENT)  # killed before the result
    assert whose.ending(job(S.PENDING, attempt=1), 0, [intent]) is None


def test_a_workload_that_restarts_itself_is_not_requeued_by_a_person() -> None:
    assert whose.ending(job(S.RUNNING, attempt=2, exclusions_while_running=True), 1, []) is None


def test_in_flight_a_hold_that_is_not_ours_is_a_persons() -> None:
    held = job(S.PENDING, attempt=1, held=True, hold_reason="JobHeldAdmin")
    ours = [row(actions.Operation.REQUEUE)]
    change = whose.interference(held, 0, ours, ours)
    assert change is not None and change.what == "held"
    mine = [row(actions.Operation.REQUEUE_HOLD)]
    assert whose.interference(held, 0, mine, mine) is None


def test_in_flight_an_exclusion_of_ours_removed_by_someone_is_theirs() -> None:
    rows = [row(actions.Operation.REQUEUE_HOLD), row(actions.Operation.EXCLUDE_NODES, excluded_nodes=["node2"])]
    pending = job(S.PENDING, attempt=1, held=True, excluded_nodes=[])
    change = whose.interference(pending, 0, rows, rows)
    assert change is not None and change.what == "exclusions-changed" and "node2" in change.detail
    kept = job(S.PENDING, attempt=1, held=True, excluded_nodes=["node2", "node9"])
    assert whose.interference(kept, 0, rows, rows) is None


def test_the_payload_says_who_and_what() -> None:
    change = whose.ending(job(S.CANCELLED), 0, [])
    assert change is not None
    payload = change.payload(job(S.CANCELLED))
    assert payload["status"] == "not-ours" and payload["by"] == "person" and payload["change"] == "cancelled"


def test_a_hold_or_suspend_that_is_not_ours_is_a_persons_and_ours_is_not() -> None:
    suspended = job(S.PENDING, held=True, hold_reason="Suspended", hold_detail="suspended by someone else")
    change = whose.ending(suspended, 0, [])
    assert change is not None and (change.who, change.what) == ("person", "held")
    assert whose.ending(suspended, 0, [row(actions.Operation.HOLD)]) is None


def test_the_next_attempt_held_by_our_requeue_hold_is_ours() -> None:
    held = job(S.PENDING, attempt=1, held=True, hold_reason="JobHeldUser", hold_detail="job requeued in held state")
    assert whose.ending(held, 1, [row(actions.Operation.REQUEUE_HOLD, attempt=0)]) is None
    change = whose.ending(held, 1, [row(actions.Operation.REQUEUE, attempt=0)])
    assert change is not None and change.what == "held"
