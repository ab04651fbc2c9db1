"""policy.decide: every decision path, with explicit timestamps."""

from __future__ import annotations

from typing import Any

import pytest

from trainguard.model import advice, anomalies, evidence, verdicts, vocab, workloads
from trainguard.policy import decide, ledger, model

NOW = 1_700_000_000.0
A = vocab.AdviceAction
J = workloads.JobState


def _spec(**sections: Any) -> model.RecoveryPolicySpec:
    return model.RecoveryPolicySpec.model_validate(sections)


def _anomaly(
    symptom: vocab.Symptom = vocab.Symptom.CRASH, category: vocab.Category = vocab.Category.GPU_XID_HARDWARE
) -> anomalies.Anomaly:
    return anomalies.Anomaly(symptom=symptom, category=category)


def _verdict(
    attribution: vocab.Attribution = vocab.Attribution.HARDWARE,
    category: vocab.Category = vocab.Category.GPU_XID_HARDWARE,
    nodes: list[str] | None = None,
    lemons: list[str] | None = None,
) -> verdicts.Verdict:
    return verdicts.Verdict(
        attribution=attribution, category=category, suspect_nodes=nodes or [], lemon_nodes=lemons or []
    )


def _job(**fields: Any) -> workloads.JobSnapshot:
    base: dict[str, Any] = {
        "workload": "slurm/c/42",
        "job_id": "42",
        "state": J.FAILED,
        "exit_code": 1,
        "nodes": ["n1", "n2", "n3", "n4"],
        "partition": "gpu",
    }
    return workloads.JobSnapshot.model_validate({**base, **fields})


def _history(checkpoint: bool = True, retries: int = 0, excluded: list[str] | None = None) -> ledger.WorkloadHistory:
    history = ledger.WorkloadHistory(workload="slurm/c/42", excluded_nodes=excluded or [])
    history = ledger.record_attempt_start(history, retries, NOW - 600)
    if checkpoint:
        history = ledger.record_checkpoint(history, retries, NOW - 300)
    return history


def _decide(
    spec: model.RecoveryPolicySpec | None = None,
    *,
    anomaly: anomalies.Anomaly | None = None,
    verdict: verdicts.Verdict | None = None,
    history: ledger.WorkloadHistory | None = None,
    job: workloads.JobSnapshot | None = None,
    attempt: int = 0,
    partition_nodes: int | None = None,
    allocation: list[str] | None = None,
    node_actions: tuple[str, ...] = ("drainNode",),
) -> advice.Advice:
    return decide.decide(
        spec or _spec(),
        workload="slurm/c/42",
        attempt=attempt,
        anomaly=anomaly or _anomaly(),
        verdict=verdict or _verdict(nodes=["n2"]),
        history=history or _history(retries=attempt),
        job=job or _job(attempt=attempt),
        generation=3,
        now=NOW,
        policy_name="gpu",
        partition_nodes=partition_nodes,
        allocation=allocation,
        node_actions=node_actions,
    )


def test_hardware_failure_requeues_without_the_suspect() -> None:
    result = _decide()
    assert result.action == A.REQUEUE
    assert result.exclude_nodes == ["n2"]
    assert result.mode == vocab.Mode.MONITOR
    assert result.deadline == NOW + 300.0
    assert (result.workload, result.attempt, result.generation, result.policy) == ("slurm/c/42", 0, 3, "gpu")
    assert result.decided_by == vocab.Decider.POLICY_ENGINE
    assert "exclude n2" in result.reasons
    assert result.reasons[-1] == "Monitor mode: recorded, not carried out"


def test_action_mode_gives_the_same_advice_with_mode_action() -> None:
    monitor = _decide(_spec(mode="Monitor"))
    action = _decide(_spec(mode="Action"))
    assert action.mode == vocab.Mode.ACTION
    assert (action.action, action.exclude_nodes) == (monitor.action, monitor.exclude_nodes)
    assert "Monitor mode: recorded, not carried out" not in action.reasons


def test_healthy_and_completed_need_nothing() -> None:
    healthy = _decide(
        anomaly=_anomaly(vocab.Symptom.HEALTHY, vocab.Category.NONE),
        verdict=_verdict(vocab.Attribution.NONE, vocab.Category.NONE),
    )
    assert healthy.action == A.NONE
    completed = _decide(job=_job(state=J.COMPLETED, exit_code=0))
    assert completed.action == A.NONE and "completed" in completed.reasons[0]


def test_do_not_requeue_exit_code_stops() -> None:
    result = _decide(job=_job(state=J.RUNNING, exit_code=93))
    assert result.action == A.STOP
    assert result.exclude_nodes == []
    assert "exit code 93" in result.reasons[0]


def test_do_not_requeue_on_a_finished_unrequeueable_job_is_nothing() -> None:
    result = _decide(job=_job(state=J.FAILED, exit_code=93, requeue_allowed=False))
    assert result.action == A.NONE
    assert "has ended" in result.reasons[0]


def test_custom_do_not_requeue_codes() -> None:
    assert _decide(_spec(doNotRequeueExitCodes=[42]), job=_job(exit_code=42)).action == A.STOP
    assert _decide(_spec(doNotRequeueExitCodes=[42]), job=_job(exit_code=93)).action == A.REQUEUE


def test_retries_exhausted_stops() -> None:
    result = _decide(attempt=3)
    assert result.action == A.STOP
    assert result.exclude_nodes == []
    assert "retries exhausted (3 of maxRetries 3): stop" in result.reasons


def test_scheduler_restart_count_counts_even_if_history_is_behind() -> None:
    result = _decide(history=_history(retries=0), job=_job(attempt=3), attempt=0)
    assert result.action == A.STOP


def test_last_retry_is_still_allowed() -> None:
    result = _decide(attempt=2)
    assert result.action == A.REQUEUE
    assert "retry 3 of 3; 0 attempt(s) without a new checkpoint (limit 2)" in result.reasons


def test_no_checkpoint_streak_stops() -> None:
    history = ledger.WorkloadHistory(workload="slurm/c/42")
    history = ledger.record_attempt_end(history, 0, NOW - 900)
    history = ledger.record_attempt_start(history, 1, NOW - 600)
    result = _decide(history=history, attempt=1, job=_job(attempt=1))
    assert result.action == A.STOP
    assert any("2 attempts in a row without a new checkpoint" in reason for reason in result.reasons)


def test_the_workloads_own_restart_before_the_judgement_is_not_a_second_attempt_without_progress() -> None:
    """A JobSet's failure policy can start attempt 1 before attempt 0's failure is judged: attempt 0 is
    one attempt without a checkpoint, not two (the engine judged it a stop under load)."""
    history = ledger.record_attempt_end(ledger.WorkloadHistory(workload="w"), 0, NOW - 30)
    history = ledger.record_attempt_start(history, 1, NOW - 28)
    result = _decide(history=history, attempt=0, job=_job(attempt=1))
    assert result.action == A.REQUEUE, result.reasons


def test_current_attempt_counts_even_before_it_is_recorded() -> None:
    history = ledger.record_attempt_end(ledger.WorkloadHistory(workload="w"), 0, NOW - 900)
    assert _decide(history=history, attempt=1, job=_job(attempt=1)).action == A.STOP
    assert _decide(_spec(retries={"maxAttemptsWithoutCheckpoint": 3}), history=history, attempt=1).action == A.REQUEUE


def test_application_error_requeues_or_stops_per_policy() -> None:
    app = _verdict(vocab.Attribution.APPLICATION, vocab.Category.PYTHON_EXCEPTION, nodes=["n1"])
    requeue = _decide(verdict=app)
    assert requeue.action == A.REQUEUE and requeue.exclude_nodes == []
    stop = _decide(_spec(applicationErrorAction="stop"), verdict=app)
    assert stop.action == A.STOP
    assert "applicationErrorAction is stop" in stop.reasons[0]


def test_hang_requeues() -> None:
    result = _decide(
        anomaly=_anomaly(vocab.Symptom.HANG, vocab.Category.PROGRESS_STALLED),
        verdict=_verdict(vocab.Attribution.UNKNOWN, vocab.Category.PROGRESS_STALLED),
        job=_job(state=J.RUNNING, exit_code=None),
    )
    assert result.action == A.REQUEUE and result.exclude_nodes == []
    assert result.reasons[0] == "hang (progress_stalled): requeue"


def test_unknown_failure_does_not_exclude_its_suspects() -> None:
    result = _decide(verdict=_verdict(vocab.Attribution.UNKNOWN, vocab.Category.SEGFAULT, nodes=["n1"]))
    assert result.action == A.REQUEUE and result.exclude_nodes == []


def test_straggler_is_recorded_only_by_default() -> None:
    straggler = _anomaly(vocab.Symptom.STRAGGLER, vocab.Category.THROUGHPUT_DROP)
    slow = _verdict(vocab.Attribution.UNKNOWN, vocab.Category.THROUGHPUT_DROP, nodes=["n3"])
    result = _decide(anomaly=straggler, verdict=slow, job=_job(state=J.RUNNING, exit_code=None))
    assert result.action == A.NONE
    assert "throughputDropAction is off" in result.reasons[0]


def test_straggler_requeue_excludes_the_slow_node_when_enabled() -> None:
    straggler = _anomaly(vocab.Symptom.STRAGGLER, vocab.Category.THROUGHPUT_DROP)
    slow = _verdict(vocab.Attribution.UNKNOWN, vocab.Category.THROUGHPUT_DROP, nodes=["n3"])
    result = _decide(
        _spec(detection={"throughputDropAction": "requeue"}),
        anomaly=straggler,
        verdict=slow,
        job=_job(state=J.RUNNING, exit_code=None),
    )
    assert result.action == A.REQUEUE and result.exclude_nodes == ["n3"]
    assert "requeue without the slow node (n3)" in result.reasons[0]


def test_straggler_requeue_without_a_named_node_says_it_excludes_none() -> None:
    """The whole job slowed and no rank fell behind: the advice must not promise an exclusion it does
    not make (issue 23: it read "requeue without the slow node" and excluded nobody)."""
    straggler = _anomaly(vocab.Symptom.STRAGGLER, vocab.Category.THROUGHPUT_DROP)
    unnamed = _verdict(vocab.Attribution.UNKNOWN, vocab.Category.THROUGHPUT_DROP)
    result = _decide(
        _spec(detection={"throughputDropAction": "requeue"}),
        anomaly=straggler,
        verdict=unnamed,
        job=_job(state=J.RUNNING, exit_code=None),
    )
    assert result.action == A.REQUEUE and result.exclude_nodes == []
    assert "no slow node could be named" in result.reasons[0] and "none is excluded" in result.reasons[0]
    assert not any("without the slow node" in reason for reason in result.reasons)
    lemon = _decide(
        _spec(detection={"throughputDropAction": "requeue"}),
        anomaly=straggler,
        verdict=_verdict(vocab.Attribution.UNKNOWN, vocab.Category.THROUGHPUT_DROP, lemons=["n4"]),
        job=_job(state=J.RUNNING, exit_code=None),
    )
    assert lemon.exclude_nodes == ["n4"] and "without the lemon nodes (n4)" in lemon.reasons[0]


def test_exclusions_merge_with_earlier_ones_and_respect_the_cap() -> None:
    history = _history(excluded=["n1"])
    two = _decide(verdict=_verdict(nodes=["n2", "n3"]), history=history)
    assert two.exclude_nodes == ["n1", "n2"]
    assert any("only n2 excluded, not n3" in reason for reason in two.reasons)
    full = _decide(verdict=_verdict(nodes=["n3"]), history=_history(excluded=["n1", "n2"]))
    assert full.action == A.REQUEUE and full.exclude_nodes == ["n1", "n2"]
    assert any("maxExcludedNodesPerJob 2 reached" in reason for reason in full.reasons)


def test_scheduler_side_exclusions_are_kept() -> None:
    result = _decide(job=_job(excluded_nodes=["n4"]))
    assert result.exclude_nodes == ["n4", "n2"]


def test_nodes_outside_the_job_are_not_excluded() -> None:
    result = _decide(verdict=_verdict(nodes=["n9", "n2"]))
    assert result.exclude_nodes == ["n2"]
    assert "not excluded, the workload did not run there: n9" in result.reasons


def test_the_failed_attempts_node_is_excluded_after_the_job_moved_off_it() -> None:
    """A PyTorchJob's failed worker is re-created on another node before the decision: the job's
    current nodes no longer hold the suspect, the workload's allocation does."""
    moved = _job(nodes=["n1", "n3", "n4"])
    assert _decide(verdict=_verdict(nodes=["n2"]), job=moved).exclude_nodes == []
    result = _decide(verdict=_verdict(nodes=["n2", "n9"]), job=moved, allocation=["n1", "n2", "n3", "n4"])
    assert result.exclude_nodes == ["n2"]
    assert "not excluded, the workload did not run there: n9" in result.reasons


def test_exclusion_dropped_when_the_job_could_no_longer_fit() -> None:
    fits = _decide(partition_nodes=5)
    assert fits.exclude_nodes == ["n2"]
    too_small = _decide(partition_nodes=4)
    assert too_small.action == A.REQUEUE and too_small.exclude_nodes == []
    assert any("would leave 3 of 4 nodes for a job that needs 4" in reason for reason in too_small.reasons)


def test_exclude_on_hardware_off() -> None:
    result = _decide(_spec(exclusion={"excludeOnHardware": False}))
    assert result.action == A.REQUEUE and result.exclude_nodes == []
    assert "excludeOnHardware is false: the suspect nodes are not excluded" in result.reasons


def test_lemon_nodes_are_excluded_even_for_an_unknown_verdict() -> None:
    verdict = _verdict(vocab.Attribution.UNKNOWN, vocab.Category.SEGFAULT, nodes=["n4"], lemons=["n4"])
    result = _decide(verdict=verdict)
    assert result.exclude_nodes == ["n4"] and result.drain_nodes == []


def test_lemon_drain_needs_the_switch_and_an_allowed_action() -> None:
    verdict = _verdict(nodes=["n2"], lemons=["n2"])
    switch_only = _decide(_spec(exclusion={"drainLemonNodes": True}), verdict=verdict)
    assert switch_only.drain_nodes == []
    assert any("neither drainNode nor cordonNode is allowed" in reason for reason in switch_only.reasons)
    allowed = _spec(exclusion={"drainLemonNodes": True}, actions={"allowed": ["requeue", "stop", "drainNode"]})
    drained = _decide(allowed, verdict=verdict)
    assert drained.drain_nodes == ["n2"]
    assert drained.drain_in_scheduler
    cordon = _spec(exclusion={"drainLemonNodes": True}, actions={"allowed": ["requeue", "cordonNode"]})
    cordoned = _decide(cordon, verdict=verdict)
    assert cordoned.drain_nodes == ["n2"]
    # cordonNode alone: where a drain is no cordon (plain Slurm), nothing is taken out of service and
    # the advice says why; on Slinky (a drain is a cordon of the Kubernetes node) it is carried out.
    assert not cordoned.drain_in_scheduler
    assert any("this installation cordons no Kubernetes node" in reason for reason in cordoned.reasons)
    on_slinky = _decide(cordon, verdict=verdict, node_actions=("drainNode", "cordonNode"))
    assert on_slinky.drain_nodes == ["n2"] and on_slinky.drain_in_scheduler


@pytest.mark.parametrize(
    ("allowed", "wanted_job", "expected"),
    [
        (["requeue", "hold"], {"exit_code": 93, "state": J.RUNNING}, A.HOLD),
        (["requeue"], {"exit_code": 93, "state": J.RUNNING}, A.NONE),
        (["stop"], {}, A.NONE),
        ([], {}, A.NONE),
    ],
)
def test_disallowed_actions_fall_back(allowed: list[str], wanted_job: dict[str, Any], expected: A) -> None:
    result = _decide(_spec(actions={"allowed": allowed}), job=_job(**wanted_job))
    assert result.action == expected
    assert result.exclude_nodes == []
    assert any("is not in actions.allowed" in reason for reason in result.reasons)


def test_no_requeue_job_gets_nothing() -> None:
    result = _decide(job=_job(requeue_allowed=False))
    assert result.action == A.NONE
    assert "cannot be requeued" in " ".join(result.reasons)


def test_deterministic() -> None:
    assert _decide() == _decide()


def test_retry_delay_grows_and_is_capped() -> None:
    spec = _spec(retries={"backoff": {"initialSeconds": 30, "maxSeconds": 100, "factor": 2}})
    assert [decide.retry_delay(spec, used) for used in (0, 1, 2, 3, 4, 1000)] == [0.0, 30.0, 60.0, 100.0, 100.0, 100.0]


def test_first_retry_is_immediate_and_later_ones_back_off() -> None:
    first = _decide()
    assert first.release_at is None
    assert first.deadline == NOW + 300.0
    second = _decide(attempt=1)
    assert second.action == A.REQUEUE
    assert second.release_at == NOW + 30.0
    assert second.deadline == NOW + 30.0 + 300.0
    assert any("retry backoff" in reason for reason in second.reasons)


def test_a_stop_carries_no_backoff() -> None:
    spec = _spec(retries={"maxRetries": 1})
    result = _decide(spec, attempt=1)
    assert result.action == A.STOP
    assert result.release_at is None


# -- issue 9: the user's own exclusions, and nodes outside the allocation ---------------------------


def test_the_users_own_exclusions_do_not_count_against_the_cap() -> None:
    """The job was submitted with ``--exclude=n9``; with a cap of 1 the Xid node is still excluded."""
    spec = _spec(exclusion={"maxExcludedNodesPerJob": 1})
    result = _decide(spec, job=_job(excluded_nodes=["n9"]))
    assert result.action == A.REQUEUE
    assert result.exclude_nodes == ["n9", "n2"], result.reasons  # the user's stays, ours is added


def test_our_own_exclusions_count_against_the_cap() -> None:
    spec = _spec(exclusion={"maxExcludedNodesPerJob": 1})
    result = decide.decide(
        spec, workload="slurm/c/42", attempt=1, anomaly=_anomaly(), verdict=_verdict(nodes=["n3"]),
        history=_history(retries=1), job=_job(attempt=1, excluded_nodes=["n9", "n2"]), generation=1, now=NOW,
        own_exclusions=["n2"],
    )
    assert result.exclude_nodes == ["n9", "n2"]
    assert any("maxExcludedNodesPerJob 1 reached (ours: n2): not excluded: n3" in r for r in result.reasons)


def test_lemon_nodes_outside_the_allocation_are_not_drained() -> None:
    spec = _spec(exclusion={"drainLemonNodes": True}, actions={"allowed": ["requeue", "stop", "drainNode"]})
    result = _decide(spec, verdict=_verdict(nodes=["n2"], lemons=["n2", "n7"]))
    assert result.drain_nodes == ["n2"]
    assert any("not drained, the workload never ran there: n7" in r for r in result.reasons)
    earlier = decide.decide(
        spec, workload="slurm/c/42", attempt=1, anomaly=_anomaly(), verdict=_verdict(lemons=["n7"]),
        history=_history(retries=1), job=_job(attempt=1), generation=1, now=NOW, allocation={"n1", "n7"},
    )
    assert earlier.drain_nodes == ["n7"], "a node an earlier attempt ran on is part of the allocation"


def _metric_fault() -> anomalies.Anomaly:
    """What the engine raises for an Xid 79 in the GPU metrics of a running job (no log line)."""
    item = anomalies.Evidence(line=0, text="node2 GPU 1: Xid 79 reported by DCGM during the attempt",
                              pattern=evidence.METRIC_FAULT_PATTERN, source="prometheus", node="node2", gpu=1,
                              xid=79, category=vocab.Category.GPU_XID_HARDWARE)
    return anomalies.Anomaly(symptom=vocab.Symptom.CRASH, category=vocab.Category.GPU_XID_HARDWARE,
                             evidence=[item], suspect_nodes=["node2"])


def test_a_gpu_metric_fault_of_a_running_job_is_recorded_only_by_default() -> None:
    result = _decide(anomaly=_metric_fault(), verdict=_verdict(nodes=["node2"]),
                     job=_job(state=J.RUNNING, exit_code=None))
    assert result.action == A.NONE and result.exclude_nodes == []
    assert "gpuMetricAction is record" in result.reasons[0]


def test_a_gpu_metric_fault_requeues_without_the_node_when_enabled() -> None:
    result = _decide(_spec(detection={"gpuMetricAction": "requeue"}), anomaly=_metric_fault(),
                     verdict=_verdict(nodes=["node2"]),
                     job=_job(state=J.RUNNING, exit_code=None, nodes=["node1", "node2"]))
    assert result.action == A.REQUEUE and result.exclude_nodes == ["node2"]
