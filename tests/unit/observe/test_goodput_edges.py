"""Goodput accounting's edge cases on hand-made attempt facts (no database: the pure part).

The store round trip of real histories is tested in tests/integration/store/test_goodput.py; here
the cases that a crafted history there would only repeat: a failure without an anomaly, a failure
never recovered, clocks that disagree, a checkpoint after the onset, a cancelled attempt.
"""

from __future__ import annotations

from typing import Any

from trainguard.observe import goodput
from trainguard.store.goodput import AttemptFacts

T0 = 1_000_000.0


def facts(attempt: int = 0, **fields: Any) -> AttemptFacts:
    base: dict[str, Any] = {"workload": "w", "policy": "p", "attempt": attempt, "state": "RUNNING",
                            "started_at": T0, "ended_at": None, "nodes": ("n1",), "last_checkpoint_at": None}
    return AttemptFacts(**{**base, **fields})


def only_failure(accounts: list[goodput.AttemptAccount]) -> goodput.Failure:
    found = [a.failure for a in accounts if a.failure is not None]
    assert len(found) == 1, found
    return found[0]


def test_a_failed_end_without_anomaly_is_a_failure_from_its_end() -> None:
    accounts = goodput.account([facts(state="NODE_FAIL", ended_at=T0 + 100),
                                facts(1, started_at=T0 + 130, state="COMPLETED", ended_at=T0 + 200)], now=T0 + 999)
    f = only_failure(accounts)
    assert (f.work_lost_s, f.detection_s, f.decision_s, f.requeue_wait_s) == (100, 0, 0, 30)
    assert (f.category, f.requeued_by, f.estimate, f.checkpoint_basis) == ("none", "other", "none", "attempt_start")


def test_a_stopped_failure_has_no_requeue_wait_and_no_estimate() -> None:
    accounts = goodput.account([facts(state="CANCELLED", ended_at=T0 + 60, onset_at=T0 + 40, detected_at=T0 + 42,
                                      anomaly_symptom="crash", anomaly_category="segfault", advised_at=T0 + 43,
                                      advice_action="stop", last_checkpoint_at=T0 + 30)], now=T0 + 999)
    f = only_failure(accounts)
    assert (f.work_lost_s, f.detection_s, f.decision_s, f.action_s, f.requeue_wait_s) == (10, 2, 1, 0, 0)
    assert (f.recovered, f.requeued_by, f.baseline_lost_s, f.estimate) == (False, "none", None, "none")
    (row,) = goodput.rows(accounts)
    assert (row["mttr_seconds"], row["mtbf_seconds"], row["productive_seconds"]) == (None, 40, 30)


def test_clocks_that_disagree_never_make_a_piece_negative() -> None:
    # the anomaly recorded "before" its line, the advice before the anomaly, a checkpoint after the onset
    accounts = goodput.account([
        facts(state="REQUEUED", ended_at=T0 + 50, onset_at=T0 + 40, detected_at=T0 + 39.5, anomaly_symptom="crash",
              anomaly_category="segfault", advised_at=T0 + 39, requeued_at=T0 + 41, last_checkpoint_at=T0 + 45),
        facts(1, started_at=T0 + 60)], now=T0 + 100)
    f = only_failure(accounts)
    assert (f.work_lost_s, f.detection_s, f.decision_s, f.action_s, f.requeue_wait_s) == (0, 0, 0, 1, 19)
    assert accounts[0].productive_s + f.lost_s == 60


def test_a_completed_run_with_a_slowdown_and_a_cancel_without_anomaly_are_productive() -> None:
    accounts = goodput.account([
        facts(state="COMPLETED", ended_at=T0 + 100, onset_at=T0 + 10, detected_at=T0 + 20,
              anomaly_symptom="straggler", anomaly_category="throughput_drop"),
        facts(state="CANCELLED", ended_at=T0 + 50, workload="v")], now=T0 + 999)
    assert [a.failure for a in accounts] == [None, None]
    assert [a.productive_s for a in accounts] == [100, 50]


def test_a_silent_hang_requeued_by_us_is_estimated_with_the_jobs_own_timeout() -> None:
    hang = facts(state="REQUEUED", ended_at=T0 + 200, onset_at=T0 + 100, detected_at=T0 + 160, anomaly_symptom="hang",
                 anomaly_category="progress_stalled", advised_at=T0 + 160, requeued_at=T0 + 161,
                 last_checkpoint_at=T0 + 80)
    later = facts(1, started_at=T0 + 221)
    f = only_failure(goodput.account([hang, later], now=T0 + 300,
                                     assume=goodput.Assumptions(job_timeout_s=300, manual_delay_s=120)))
    assert (f.estimate, f.baseline_lost_s) == ("job_timeout", 20 + 300 + 120 + 60)
    # a timeout shorter than our detection: the job's own would not have been faster than ours was
    f = only_failure(goodput.account([hang, later], now=T0 + 300,
                                     assume=goodput.Assumptions(job_timeout_s=10, manual_delay_s=0)))
    assert f.baseline_lost_s == 20 + 60 + 0 + 60
