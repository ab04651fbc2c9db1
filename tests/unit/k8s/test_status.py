"""WorkloadRecovery status as a projection of the engine's view (k8s/status.py): pure, explicit times."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from trainguard.k8s import condition, recovery, status
from trainguard.model import actions, vocab, workloads

T0 = datetime.datetime(2026, 1, 31, 12, 0, tzinfo=datetime.UTC)
WORKLOAD = "slurm/gpu-a/1234"


def job(state: workloads.JobState = workloads.JobState.RUNNING, **fields: Any) -> workloads.JobSnapshot:
    return workloads.JobSnapshot(workload=WORKLOAD, job_id="1234", state=state, **fields)


ANOMALY = {"symptom": "crash", "category": "gpu_fallen_off_bus", "suspect_nodes": ["node3"],
           "evidence": [{"line": 7, "text": "NVRM: Xid ...: 79", "pattern": "gpu.fallen_off_bus"}]}
VERDICT = {"attribution": "hardware", "category": "gpu_fallen_off_bus", "suspect_nodes": ["node3"]}


def advice(mode: str = "Action", action: str = "requeue", generation: int = 1, attempt: int = 0) -> dict[str, Any]:
    return {"workload": WORKLOAD, "attempt": attempt, "generation": generation, "action": action, "mode": mode,
            "exclude_nodes": ["node3"], "reasons": ["hardware failure: requeue"], "deadline": 1769861100.0}


def records(*items: tuple[str, dict[str, Any]]) -> tuple[status.Record, ...]:
    return tuple(status.Record(kind, 1769860800.0 + i, payload) for i, (kind, payload) in enumerate(items))


def view(**fields: Any) -> status.WorkloadView:
    base: dict[str, Any] = {"workload": WORKLOAD, "job": job(), "policy_name": "llm", "mode": vocab.Mode.ACTION}
    return status.WorkloadView(**(base | fields))


def test_a_running_job_without_records_is_running_with_its_policy_resolved() -> None:
    st = status.project(view(), None, generation=1, now=T0)
    assert (st.phase, st.attempt, st.advice, st.last_anomaly) == (recovery.Phase.RUNNING, 1, None, None)
    types = {c.type: (c.status, c.reason) for c in st.conditions}
    assert types == {
        condition.POLICY_RESOLVED: (condition.ConditionStatus.TRUE, status.POLICY_FOUND),
        condition.DEGRADED: (condition.ConditionStatus.FALSE, status.NO_ANOMALY),
        condition.READY: (condition.ConditionStatus.TRUE, status.WORKLOAD_HEALTHY),
    }
    assert all(c.observed_generation == 1 and c.last_transition_time == T0 for c in st.conditions)


def test_uncovered_workload_says_why_in_policy_resolved() -> None:
    st = status.project(view(mode=None, opt_in_errors=("no RecoveryPolicy named 'llm'",)), None, generation=3, now=T0)
    resolved = next(c for c in st.conditions if c.type == condition.POLICY_RESOLVED)
    assert (resolved.status, resolved.reason, resolved.message) == (
        condition.ConditionStatus.FALSE, status.POLICY_NOT_FOUND, "no RecoveryPolicy named 'llm'")


def test_open_anomaly_on_a_running_attempt_is_degraded_with_its_verdict() -> None:
    st = status.project(view(records=records(("anomaly", ANOMALY), ("verdict", VERDICT)), detector_attempt=0),
                        None, generation=1, now=T0)
    assert st.phase == recovery.Phase.DEGRADED
    assert st.last_anomaly is not None
    assert (st.last_anomaly.category, st.last_anomaly.verdict, st.last_anomaly.nodes, st.last_anomaly.pattern) == (
        vocab.Category.GPU_FALLEN_OFF_BUS, vocab.Attribution.HARDWARE, ["node3"], "gpu.fallen_off_bus")
    assert st.last_anomaly.attempt == 1
    degraded = next(c for c in st.conditions if c.type == condition.DEGRADED)
    assert (degraded.status, degraded.reason) == (condition.ConditionStatus.TRUE, status.ANOMALY_OPEN)


def test_monitor_advice_on_a_failed_job_is_recorded_not_recovering() -> None:
    v = view(job=job(workloads.JobState.FAILED, exit_code=1), mode=vocab.Mode.MONITOR,
             records=records(("anomaly", ANOMALY), ("verdict", VERDICT), ("advice", advice("Monitor")),
                             ("outcome", {"generation": 1, "disposition": "Monitored"})),
             disposition=vocab.Disposition.MONITORED)
    st = status.project(v, None, generation=1, now=T0)
    assert st.phase == recovery.Phase.FAILED
    assert st.advice is not None
    assert (st.advice.action, st.advice.mode, st.advice.disposition, st.advice.exclude_nodes) == (
        vocab.AdviceAction.REQUEUE, vocab.Mode.MONITOR, vocab.Disposition.MONITORED, ["node3"])
    assert st.advice.deadline == datetime.datetime(2026, 1, 31, 12, 5, tzinfo=datetime.UTC)
    converged = next(c for c in st.conditions if c.type == condition.CONVERGED)
    assert (converged.status, converged.reason) == (condition.ConditionStatus.TRUE, status.ADVICE_RECORDED)
    assert st.restarts == 0


def test_action_in_progress_is_recovering_then_a_verified_requeue_counts_as_restart() -> None:
    pending = view(job=job(workloads.JobState.FAILED), recovering=True, disposition=vocab.Disposition.PENDING,
                   records=records(("anomaly", ANOMALY), ("verdict", VERDICT), ("advice", advice())))
    first = status.project(pending, None, generation=1, now=T0)
    assert first.phase == recovery.Phase.RECOVERING
    assert next(c for c in first.conditions if c.type == condition.CONVERGED).reason == status.RECOVERY_IN_PROGRESS

    later = T0 + datetime.timedelta(seconds=30)
    done = view(job=job(workloads.JobState.RUNNING, attempt=1, excluded_nodes=["node3"]),
                disposition=vocab.Disposition.CONVERGED,
                records=pending.records + records(("outcome", {"generation": 1, "disposition": "Converged"})))
    second = status.project(done, first, generation=1, now=later)
    assert (second.phase, second.attempt, second.restarts, second.excluded_nodes) == (
        recovery.Phase.RUNNING, 2, 1, ["node3"])
    converged = next(c for c in second.conditions if c.type == condition.CONVERGED)
    assert (converged.status, converged.reason, converged.last_transition_time) == (
        condition.ConditionStatus.TRUE, status.DESIRED_STATE_REACHED, later)
    resolved = next(c for c in second.conditions if c.type == condition.POLICY_RESOLVED)
    assert resolved.last_transition_time == T0, "unchanged conditions keep their transition time"


def test_same_view_projects_to_an_equal_status_so_nothing_is_written() -> None:
    v = view(records=records(("anomaly", ANOMALY), ("verdict", VERDICT)))
    first = status.project(v, None, generation=2, now=T0)
    again = status.project(v, first, generation=2, now=T0 + datetime.timedelta(minutes=5))
    assert again == first
    round_trip = status.parse_status(status.status_body(first))
    assert round_trip == first


def test_terminal_phase_is_kept_against_an_impossible_transition() -> None:
    done = status.project(view(job=job(workloads.JobState.COMPLETED)), None, generation=1, now=T0)
    assert done.phase == recovery.Phase.SUCCEEDED
    odd = status.project(view(job=job(workloads.JobState.RUNNING)), done, generation=1, now=T0)
    assert odd.phase == recovery.Phase.SUCCEEDED


def test_a_held_job_seen_next_as_completed_becomes_succeeded() -> None:
    """Rounds on a busy operator can miss the release and the run in between: the ending still shows."""
    held = status.project(view(job=job(workloads.JobState.PENDING, held=True)), None, generation=1, now=T0)
    assert held.phase == recovery.Phase.HELD
    done = status.project(view(job=job(workloads.JobState.COMPLETED)), held, generation=1, now=T0)
    assert done.phase == recovery.Phase.SUCCEEDED


@pytest.mark.parametrize(
    ("state", "held", "phase"),
    [
        (workloads.JobState.CANCELLED, False, recovery.Phase.STOPPED),
        (workloads.JobState.PENDING, True, recovery.Phase.HELD),
        (workloads.JobState.NODE_FAIL, False, recovery.Phase.FAILED),
        (workloads.JobState.PENDING, False, recovery.Phase.RUNNING),
    ],
)
def test_phase_follows_the_scheduler_state(state: workloads.JobState, held: bool, phase: recovery.Phase) -> None:
    assert status.phase_of(view(job=job(state, held=held)), anomaly_open=False) == phase


def test_recent_anomalies_are_newest_first_and_bounded() -> None:
    many = records(*[("anomaly", ANOMALY | {"category": c}) for c in ["nccl_timeout"] * 11 + ["segfault"]])
    st = status.project(view(records=many), None, generation=1, now=T0)
    assert len(st.recent_anomalies) == recovery.MAX_RECENT
    assert st.recent_anomalies[0].category == vocab.Category.SEGFAULT
    assert st.last_anomaly == st.recent_anomalies[0]


def test_object_name_and_desired_object_validate_against_the_crd_model() -> None:
    assert status.object_name("slurm/GPU_a/1234_7") == "slurm-gpu-a-1234-7"
    obj = status.desired_object(view(), "trainguard-system")
    parsed = recovery.parse(obj)
    assert (parsed.spec.workload.kind, parsed.spec.workload.cluster, parsed.spec.workload.id) == (
        recovery.WorkloadKind.SLURM_JOB, "gpu-a", "1234")
    assert obj["metadata"]["annotations"][status.WORKLOAD_ANNOTATION] == WORKLOAD
    with pytest.raises(ValueError, match="not a Slurm workload id"):
        status.object_name("jobset/ns/name")


def step(name: str, operation: actions.Operation, at: float, generation: int = 1,
         state: actions.ActionStatus = actions.ActionStatus.DONE) -> actions.ActionRecord:
    return actions.ActionRecord(workload=WORKLOAD, attempt=0, generation=generation, step=name, operation=operation,
                                status=state, created_at=at, updated_at=at)


def test_executor_steps_are_shown_newest_first_and_kept_across_generations() -> None:
    first = view(steps=(step("requeue_hold", actions.Operation.REQUEUE_HOLD, 1769860800.0),
                        step("release", actions.Operation.RELEASE, 1769860801.0,
                             state=actions.ActionStatus.INTENT)))
    one = status.project(first, None, generation=1, now=T0)
    assert [(a.step, a.status) for a in one.recent_actions] == [
        ("release", actions.ActionStatus.INTENT), ("requeue_hold", actions.ActionStatus.DONE)]
    second = view(steps=(step("release", actions.Operation.RELEASE, 1769860802.0),
                         step("cancel", actions.Operation.CANCEL, 1769860900.0, generation=2)))
    two = status.project(second, one, generation=1, now=T0)
    assert [(a.generation, a.step, a.status) for a in two.recent_actions] == [
        (2, "cancel", actions.ActionStatus.DONE), (1, "release", actions.ActionStatus.DONE),
        (1, "requeue_hold", actions.ActionStatus.DONE)]
    assert status.project(second, two, generation=1, now=T0) == two


def ready(st: recovery.WorkloadRecoveryStatus) -> tuple[condition.ConditionStatus, str]:
    found = next(c for c in st.conditions if c.type == condition.READY)
    assert found.observed_generation == st.observed_generation
    return found.status, found.reason


@pytest.mark.parametrize(("name", "fields", "expected"), [
    ("no policy", {"mode": None}, (condition.ConditionStatus.FALSE, status.POLICY_NOT_FOUND)),
    ("anomaly open", {"records": records(("anomaly", ANOMALY), ("verdict", VERDICT))},
     (condition.ConditionStatus.FALSE, status.ANOMALY_OPEN)),
    ("recovering", {"job": job(workloads.JobState.FAILED), "recovering": True,
                    "disposition": vocab.Disposition.PENDING,
                    "records": records(("anomaly", ANOMALY), ("verdict", VERDICT), ("advice", advice()))},
     (condition.ConditionStatus.FALSE, status.RECOVERY_IN_PROGRESS)),
    ("held", {"job": job(workloads.JobState.PENDING, held=True)},
     (condition.ConditionStatus.FALSE, status.WORKLOAD_HELD)),
    ("failed, Monitor advice recorded", {
        "job": job(workloads.JobState.FAILED, exit_code=1), "mode": vocab.Mode.MONITOR,
        "disposition": vocab.Disposition.MONITORED,
        "records": records(("anomaly", ANOMALY), ("verdict", VERDICT), ("advice", advice("Monitor")))},
     (condition.ConditionStatus.FALSE, status.WORKLOAD_FAILED)),
    ("abandoned on a running job", {
        "disposition": vocab.Disposition.ABANDONED,
        "records": records(("advice", advice(action="requeue")))},
     (condition.ConditionStatus.FALSE, status.ABANDONED)),
    ("succeeded", {"job": job(workloads.JobState.COMPLETED)},
     (condition.ConditionStatus.TRUE, status.WORKLOAD_HEALTHY)),
])
def test_ready_summarises_the_other_conditions_and_the_phase(
    name: str, fields: dict[str, Any], expected: tuple[condition.ConditionStatus, str],
) -> None:
    assert ready(status.project(view(**fields), None, generation=2, now=T0)) == expected, name


def test_a_status_as_written_reads_back_unchanged_even_with_sub_second_times() -> None:
    """The API server keeps times to the second; a projection made from sub-second record times must
    compare equal to what was written, or every reconcile round patches every object again."""
    fine = tuple(status.Record(kind, 1769860800.25 + i, payload)
                 for i, (kind, payload) in enumerate([("anomaly", ANOMALY), ("verdict", VERDICT)]))
    now = T0 + datetime.timedelta(microseconds=123_456)
    written = status.status_body(status.project(view(records=fine, detector_attempt=0), None, generation=1, now=now))
    stored = {"metadata": {"generation": 1}, "status": written}
    assert not status.differs(view(records=fine, detector_attempt=0), stored, now=now)
    assert status.differs(view(records=fine[:1], detector_attempt=0, job=job(held=True)), stored, now=now)
