"""WorkloadRecovery models: the phase transition guard, the workload reference rules, round trips."""

from __future__ import annotations

import datetime
import itertools

import pytest
from pydantic import ValidationError

from trainguard.k8s import condition, policy_status, recovery
from trainguard.model import actions, vocab

Phase = recovery.Phase


def test_every_phase_has_a_row_and_terminal_phases_have_no_exit() -> None:
    assert set(recovery.TRANSITIONS) == set(Phase)
    for phase in recovery.TERMINAL:
        assert recovery.TRANSITIONS[phase] == frozenset()
    for phase, targets in recovery.TRANSITIONS.items():
        assert phase not in targets, "staying is implicit, not listed"


@pytest.mark.parametrize(("source", "target"), list(itertools.product(Phase, Phase)))
def test_guard_agrees_with_the_table(source: Phase, target: Phase) -> None:
    expected = source == target or target in recovery.TRANSITIONS[source]
    assert recovery.allowed(source, target) is expected
    if expected:
        assert recovery.transition(source, target) is target
    else:
        with pytest.raises(recovery.PhaseTransitionError, match=f"{source} cannot become {target}"):
            recovery.transition(source, target)


@pytest.mark.parametrize(
    ("source", "target", "ok"),
    [
        (Phase.RUNNING, Phase.RECOVERING, True),
        (Phase.RECOVERING, Phase.HELD, True),  # requeue-hold step
        (Phase.HELD, Phase.RECOVERING, True),  # release step
        (Phase.RECOVERING, Phase.DEGRADED, True),  # watchdog abandoned, job still running
        (Phase.FAILED, Phase.RUNNING, True),  # requeued by a human or by Slurm
        (Phase.HELD, Phase.SUCCEEDED, False),  # a held job is pending: it cannot have finished
        (Phase.SUCCEEDED, Phase.RUNNING, False),
        (Phase.STOPPED, Phase.RECOVERING, False),
        (Phase.FAILED, Phase.SUCCEEDED, False),
    ],
)
def test_the_transitions_the_loop_relies_on(source: Phase, target: Phase, ok: bool) -> None:
    assert recovery.allowed(source, target) is ok


def test_a_new_object_may_start_in_any_phase() -> None:
    for phase in Phase:
        assert recovery.transition(None, phase) is phase


def test_every_non_terminal_phase_can_reach_an_end() -> None:
    ends = recovery.TERMINAL | {Phase.FAILED}
    for start in Phase:
        seen, frontier = {start}, [start]
        while frontier:
            for nxt in recovery.TRANSITIONS[frontier.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    frontier.append(nxt)
        assert seen & ends, f"{start} can never end"


def test_the_terminal_error_message_says_so() -> None:
    with pytest.raises(recovery.PhaseTransitionError, match="none \\(terminal\\)"):
        recovery.transition(Phase.SUCCEEDED, Phase.RUNNING)


@pytest.mark.parametrize(
    ("kind", "workload_id", "ok"),
    [
        ("SlurmJob", "48213", True),
        ("SlurmJob", "48213_7", True),
        ("SlurmJob", "48213;rm", False),
        ("SlurmJob", "abc", False),
        ("SlurmJob", "", False),
        ("JobSet", "pretrain-7b", True),
        ("PyTorchJob", "bert.large-2", True),
        ("JobSet", "Pretrain_7B", False),  # a JobSet id is the object's DNS-1123 name
        ("PyTorchJob", "48213;rm", False),
        ("TrainJob", "pretrain-7b", False),  # no adapter serves it: the schema does not accept it
    ],
)
def test_workload_id_must_fit_its_kind(kind: str, workload_id: str, ok: bool) -> None:
    data = {"kind": kind, "id": workload_id}
    if ok:
        assert recovery.WorkloadRef.model_validate(data).display == f"{kind}/{workload_id}"
    else:
        with pytest.raises(ValidationError):
            recovery.WorkloadRef.model_validate(data)


def test_unknown_spec_fields_are_rejected() -> None:
    with pytest.raises(ValidationError, match="extra"):
        recovery.WorkloadRecoverySpec.model_validate(
            {"workload": {"kind": "SlurmJob", "id": "1"}, "mod": "Action"}
        )


def test_hang_timeout_override_is_a_duration() -> None:
    overrides = recovery.Overrides.model_validate({"hangTimeout": "90s", "mode": "Monitor"})
    assert overrides.hang_timeout == 90.0
    assert overrides.mode is vocab.Mode.MONITOR
    assert overrides.model_dump(by_alias=True, mode="json", exclude_none=True) == {
        "mode": "Monitor",
        "hangTimeout": "1m30s",
    }
    with pytest.raises(ValidationError):
        recovery.Overrides.model_validate({"hangTimeout": "90"})


def test_status_round_trips_in_kubernetes_wire_form() -> None:
    when = datetime.datetime(2025, 6, 2, 11, 14, 5, 123456, tzinfo=datetime.timezone(datetime.timedelta(hours=2)))
    status = recovery.WorkloadRecoveryStatus(
        phase=Phase.RECOVERING,
        attempt=2,
        last_anomaly=recovery.AnomalySummary(
            time=when,
            attempt=2,
            symptom=vocab.Symptom.CRASH,
            category=vocab.Category.GPU_XID_HARDWARE,
            verdict=vocab.Attribution.HARDWARE,
            nodes=["node7"],
        ),
        recent_actions=[
            recovery.ActionSummary(
                time=when,
                attempt=2,
                generation=1,
                step="requeue_hold",
                operation=actions.Operation.REQUEUE_HOLD,
                status=actions.ActionStatus.DONE,
            )
        ],
        conditions=[
            condition.Condition(
                type=condition.DEGRADED,
                status=condition.ConditionStatus.TRUE,
                reason="GpuXidHardware",
                message="Xid 79 on node7",
                last_transition_time=when,
            )
        ],
    )
    wire = status.model_dump(by_alias=True, mode="json", exclude_none=True)
    assert wire["lastAnomaly"]["time"] == "2025-06-02T09:14:05Z"
    assert wire["conditions"][0]["lastTransitionTime"] == "2025-06-02T09:14:05Z"
    assert wire["recentActions"][0]["operation"] == "requeue_hold"
    assert recovery.WorkloadRecoveryStatus.model_validate(wire).phase is Phase.RECOVERING


def test_naive_times_are_refused() -> None:
    with pytest.raises(ValidationError):
        condition.Condition(
            type=condition.ACCEPTED,
            status=condition.ConditionStatus.TRUE,
            reason="Valid",
            message="",
            last_transition_time=datetime.datetime(2025, 1, 1),  # naive: the point of the test
        )


def test_history_is_bounded_in_python_too() -> None:
    anomaly = {
        "time": "2025-06-02T09:14:05Z",
        "attempt": 1,
        "symptom": "hang",
        "category": "progress_stalled",
        "verdict": "unknown",
    }
    with pytest.raises(ValidationError, match="at most 10"):
        recovery.WorkloadRecoveryStatus.model_validate({"recentAnomalies": [anomaly] * 11})


def test_policy_status_defaults() -> None:
    status = policy_status.RecoveryPolicyStatus()
    assert status.model_dump(by_alias=True, mode="json") == {
        "observedGeneration": None,
        "coveredWorkloads": 0,
        "conditions": [],
    }
