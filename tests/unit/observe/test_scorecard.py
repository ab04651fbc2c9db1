"""The scorecard's rules (observe/scorecard.py): facts in, one score out; the per-policy readiness signal."""

from __future__ import annotations

from trainguard.model import workloads
from trainguard.model.workloads import JobState, NodeSnapshot
from trainguard.observe import scorecard
from trainguard.observe.scorecard import AdviceFact, AttemptFact, Detail, Score
from trainguard.store import snapshots

T0 = 1_700_000_000.0


def advice(action: str = "requeue", *, nodes: tuple[str, ...] = ("node2",), policy: str = "p") -> AdviceFact:
    return AdviceFact(workload="slurm/7", attempt=0, generation=1, action=action, policy=policy, at=T0 + 60,
                      exclusions=nodes, suspects=nodes, category="gpu_xid_hardware")


def job(state: JobState, *, restarts: int = 0, excluded: tuple[str, ...] = ()) -> workloads.JobSnapshot:
    return workloads.JobSnapshot(workload="slurm/7", job_id="7", state=state, attempt=restarts,
                                 excluded_nodes=list(excluded))


FAILED0 = AttemptFact(attempt=0, state="FAILED", nodes=("node1", "node2"), started_at=T0, ended_at=T0 + 60,
                      suspects=("node2",))
IDLE = {f"node{i}": NodeSnapshot(name=f"node{i}", state="IDLE") for i in range(1, 5)}


def test_a_person_requeueing_with_the_suspect_excluded_agrees() -> None:
    later = AttemptFact(attempt=1, state="RUNNING", nodes=("node1", "node3"), started_at=T0 + 600)
    row = scorecard.score_advice(advice(), [FAILED0, later], job(JobState.RUNNING, restarts=1, excluded=("node2",)),
                                 IDLE, gpus_per_node=8)
    assert (row.score, row.detail, row.requeued_by) == (Score.AGREE, Detail.REQUEUED_EXCLUDING_SUSPECT, "person")
    # Action mode would have requeued at once: the 540 s the job waited for a person, on 2 nodes x 8 GPUs
    assert row.gpu_hours_saved is not None and abs(row.gpu_hours_saved - 540 / 3600 * 16) < 1e-9
    assert not row.harmful


def test_requeue_after_the_scheduler_forgot_the_job_is_judged_by_the_nodes_the_next_attempt_used() -> None:
    later = AttemptFact(attempt=1, state="COMPLETED", nodes=("node1", "node3"), started_at=T0 + 90, ended_at=T0 + 200)
    row = scorecard.score_advice(advice(), [FAILED0, later], None, IDLE, stored_state="COMPLETED")
    assert (row.score, row.detail) == (Score.AGREE, Detail.REQUEUED_AVOIDING_SUSPECT)


def test_a_requeue_by_slurm_after_a_node_failure_is_told_apart_from_a_person() -> None:
    node_fail = AttemptFact(attempt=0, state="NODE_FAIL", nodes=("node1", "node2"), suspects=("node2",))
    later = AttemptFact(attempt=1, state="RUNNING", nodes=("node3", "node4"))
    row = scorecard.score_advice(advice(), [node_fail, later], job(JobState.RUNNING, restarts=1), IDLE)
    assert row.requeued_by == "slurm"


def test_a_suspect_node_drained_by_someone_else_agrees_with_the_reason_as_evidence() -> None:
    nodes = {**IDLE, "node2": NodeSnapshot(name="node2", state="IDLE+DRAIN", reason="admin: bad gpu", drained=True)}
    row = scorecard.score_advice(advice(), [FAILED0], job(JobState.FAILED), nodes)
    assert (row.score, row.detail) == (Score.AGREE, Detail.SUSPECT_DRAINED)
    assert row.drained_by_other == {"node2": "admin: bad gpu"}
    assert any("admin: bad gpu" in e for e in row.evidence)


def test_our_own_drain_is_not_someone_elses_agreement() -> None:
    nodes = {**IDLE, "node2": NodeSnapshot(name="node2", state="DRAINED", reason="trainguard: xid", drained=True)}
    row = scorecard.score_advice(advice(), [FAILED0], job(JobState.FAILED), nodes)
    assert row.drained_by_other == {}
    assert row.detail is Detail.IGNORED_JOB_STAYED_DOWN


def test_ignored_advice_on_a_failed_job_would_have_helped() -> None:
    row = scorecard.score_advice(advice(), [FAILED0], job(JobState.FAILED), IDLE)
    assert (row.score, row.detail, row.requeued_by) == (Score.WOULD_HAVE_HELPED, Detail.IGNORED_JOB_STAYED_DOWN, "none")


def test_a_requeue_without_exclusion_that_fails_again_on_the_suspect_would_have_helped() -> None:
    again = AttemptFact(attempt=1, state="FAILED", nodes=("node1", "node2"), started_at=T0 + 100,
                        ended_at=T0 + 100 + 1800, suspects=("node2",))
    row = scorecard.score_advice(advice(), [FAILED0, again], job(JobState.FAILED, restarts=1), IDLE, gpus_per_node=4)
    assert (row.score, row.detail) == (Score.WOULD_HAVE_HELPED, Detail.FAILED_AGAIN_ON_SUSPECT)
    assert row.gpu_hours_saved == 0.5 * 2 * 4


def test_a_requeue_onto_the_suspect_that_completes_disagrees() -> None:
    fine = AttemptFact(attempt=1, state="COMPLETED", nodes=("node1", "node2"), started_at=T0 + 100, ended_at=T0 + 900)
    row = scorecard.score_advice(advice(), [FAILED0, fine], job(JobState.COMPLETED, restarts=1), IDLE)
    assert (row.score, row.detail) == (Score.DISAGREE, Detail.REQUEUED_KEEPING_SUSPECT_COMPLETED)


def test_a_requeue_advice_on_a_job_that_then_completed_on_its_own_was_harmful() -> None:
    running = AttemptFact(attempt=0, state="COMPLETED", nodes=("node1", "node2"), suspects=("node2",))
    row = scorecard.score_advice(advice(), [running], job(JobState.COMPLETED), IDLE)
    assert (row.score, row.detail, row.harmful) == (Score.DISAGREE, Detail.COMPLETED_WITHOUT_ACTION, True)


def test_cancelled_instead_of_requeued_disagrees() -> None:
    row = scorecard.score_advice(advice(), [FAILED0], job(JobState.CANCELLED), IDLE)
    assert (row.score, row.detail) == (Score.DISAGREE, Detail.CANCELLED_INSTEAD)


def test_no_outcome_yet_and_a_forgotten_job_are_unknown() -> None:
    running = scorecard.score_advice(advice(), [FAILED0], job(JobState.RUNNING), IDLE)
    assert (running.score, running.detail) == (Score.UNKNOWN, Detail.NO_OUTCOME_YET)
    gone = scorecard.score_advice(advice(), [FAILED0], None, IDLE)
    assert (gone.score, gone.detail) == (Score.UNKNOWN, Detail.JOB_FORGOTTEN)


def test_stop_advice_against_a_requeued_job_that_completed_was_harmful() -> None:
    fine = AttemptFact(attempt=1, state="COMPLETED", nodes=("node3", "node4"))
    row = scorecard.score_advice(advice("stop"), [FAILED0, fine], job(JobState.COMPLETED, restarts=1), IDLE)
    assert (row.score, row.detail, row.harmful) == (Score.DISAGREE, Detail.STOP_BUT_REQUEUED_COMPLETED, True)
    left = scorecard.score_advice(advice("stop"), [FAILED0], job(JobState.FAILED), IDLE)
    assert (left.score, left.detail) == (Score.AGREE, Detail.STOP_LEFT_DOWN)


def test_readiness_needs_enough_scored_advice_high_agreement_and_nothing_harmful() -> None:
    rule = scorecard.Readiness(min_scored=3, min_agreement=0.6)
    agree = scorecard.score_advice(advice(), [FAILED0], job(JobState.FAILED), IDLE)
    unknown = scorecard.score_advice(advice(), [FAILED0], job(JobState.RUNNING), IDLE)
    harmful = scorecard.score_advice(advice(policy="q"), [FAILED0], job(JobState.COMPLETED), IDLE)
    (few,) = scorecard.summarise([agree, agree, unknown], rule)
    assert (few["policy"], few["summary"], few["scored"], few["ready_for_action"]) == ("p", True, 2, False)
    assert few["not_ready_because"] == ["only 2 scored advice (need 3)"]
    (ready,) = scorecard.summarise([agree, agree, agree, unknown], rule)
    assert (ready["agreement_rate"], ready["ready_for_action"], ready["not_ready_because"]) == (1.0, True, [])
    summaries = scorecard.summarise([agree] * 3 + [harmful] * 3, rule)
    by_policy = {s["policy"]: s for s in summaries}
    assert by_policy["q"]["harmful"] == 3 and not by_policy["q"]["ready_for_action"]
    assert by_policy["q"]["agreement_rate"] == 0.0


def test_what_the_watch_saw_counts_after_the_scheduler_forgot_the_job() -> None:
    """Slurm purged the job (no current view), but the engine's snapshots saw the person's exclusion
    and an admin's drain that was resumed later."""
    seen = [
        snapshots.Snapshot(workload="slurm/7", attempt=0, at=T0 + 70, job_state="FAILED", restarts=0,
                           nodes={"node2": {"state": "IDLE+DRAIN", "reason": "admin: gpu"}}),
        snapshots.Snapshot(workload="slurm/7", attempt=0, at=T0 + 300, job_state="RUNNING", restarts=1,
                           excluded_nodes=("node2",), nodes={"node2": {"state": "IDLE", "reason": ""}}),
        snapshots.Snapshot(workload="slurm/7", attempt=0, at=T0 + 900, job_state="GONE"),
    ]
    row = scorecard.score_advice(advice(), [FAILED0], None, IDLE, snapshots=seen)
    assert (row.score, row.detail, row.requeued_by) == (Score.AGREE, Detail.REQUEUED_EXCLUDING_SUSPECT, "person")
    assert row.drained_by_other == {"node2": "admin: gpu"}
    # without the snapshots the same facts say nothing
    assert scorecard.score_advice(advice(), [FAILED0], None, IDLE).score is Score.UNKNOWN


def test_the_users_own_exclusions_in_the_advice_blame_no_node() -> None:
    """The advice's exclusions are the whole desired set: the user's ``--exclude=node4`` is in them."""
    item = AdviceFact(workload="slurm/7", attempt=0, generation=1, action="requeue", policy="p", at=T0,
                      exclusions=("node2", "node4"), suspects=("node2",))
    assert item.nodes == ("node2",)
    later = AttemptFact(attempt=1, state="RUNNING", nodes=("node1", "node3"))
    row = scorecard.score_advice(item, [FAILED0, later], job(JobState.RUNNING, restarts=1, excluded=("node2", "node4")),
                                 IDLE)
    assert row.detail is Detail.REQUEUED_EXCLUDING_SUSPECT
