"""The per-workload ledger: pure updates, Slurm-style retry counting, no-progress streaks."""

from __future__ import annotations

import json

from trainguard.model import vocab
from trainguard.policy import ledger

T0 = 1_700_000_000.0


def test_updates_are_pure_and_ordered() -> None:
    empty = ledger.WorkloadHistory(workload="slurm/c/42")
    later = ledger.record_attempt_start(empty, 1, T0 + 100)
    both = ledger.record_attempt_start(later, 0, T0)
    assert empty.attempts == []
    assert [record.attempt for record in both.attempts] == [0, 1]
    assert both.retries_used == 1


def test_start_time_is_kept_on_repeat() -> None:
    history = ledger.record_attempt_start(ledger.WorkloadHistory(workload="w"), 0, T0)
    again = ledger.record_attempt_start(history, 0, T0 + 50)
    record = again.get(0)
    assert record is not None and record.started_at == T0


def test_retries_follow_the_scheduler_restart_count() -> None:
    history = ledger.record_attempt_start(ledger.WorkloadHistory(workload="w"), 3, T0)
    assert history.retries_used == 3


def test_attempts_without_checkpoint_counts_the_trailing_streak() -> None:
    history = ledger.WorkloadHistory(workload="w")
    history = ledger.record_checkpoint(history, 0, T0 + 10)
    history = ledger.record_attempt_end(history, 0, T0 + 20, vocab.Category.ECC_MEMORY, vocab.Attribution.HARDWARE)
    assert history.attempts_without_checkpoint() == 0
    history = ledger.record_attempt_end(history, 1, T0 + 40, vocab.Category.SEGFAULT)
    history = ledger.record_attempt_end(history, 2, T0 + 60)
    assert history.attempts_without_checkpoint() == 2
    history = ledger.record_checkpoint(history, 3, T0 + 70)
    assert history.attempts_without_checkpoint() == 0
    assert history.last_checkpoint_at() == T0 + 70


def test_checkpoint_time_never_goes_back() -> None:
    history = ledger.record_checkpoint(ledger.WorkloadHistory(workload="w"), 0, T0 + 10)
    history = ledger.record_checkpoint(history, 0, T0 + 5)
    record = history.get(0)
    assert record is not None and record.last_checkpoint_at == T0 + 10


def test_anomaly_and_end_keep_earlier_facts() -> None:
    history = ledger.record_anomaly(ledger.WorkloadHistory(workload="w"), 0, vocab.Category.NCCL_TIMEOUT)
    history = ledger.record_anomaly(history, 0, vocab.Category.GPU_XID_HARDWARE, vocab.Attribution.HARDWARE)
    history = ledger.record_attempt_end(history, 0, T0)
    record = history.get(0)
    assert record is not None
    assert (record.anomaly_category, record.attribution, record.ended_at) == (
        vocab.Category.GPU_XID_HARDWARE,
        vocab.Attribution.HARDWARE,
        T0,
    )


def test_advice_merges_exclusions_and_tracks_generation() -> None:
    history = ledger.record_advice(ledger.WorkloadHistory(workload="w"), 0, 1, vocab.AdviceAction.REQUEUE, ["n1"])
    history = ledger.record_advice(history, 1, 2, vocab.AdviceAction.REQUEUE, ["n1", "n2"])
    history = ledger.record_advice(history, 1, 1, vocab.AdviceAction.NONE, [])
    assert history.excluded_nodes == ["n1", "n2"]
    assert history.advice_generation == 2
    record = history.get(1)
    assert record is not None and record.action == vocab.AdviceAction.NONE


def test_json_round_trip() -> None:
    history = ledger.record_checkpoint(ledger.WorkloadHistory(workload="w"), 0, T0)
    history = ledger.record_advice(history, 0, 1, vocab.AdviceAction.STOP, ["n3"])
    text = json.dumps(history.model_dump(mode="json"))
    assert ledger.WorkloadHistory.model_validate(json.loads(text)) == history


def test_a_later_attempt_just_started_does_not_count_against_the_one_judged() -> None:
    """The workload's own restart can start attempt 1 before attempt 0's failure is judged."""
    history = ledger.WorkloadHistory(workload="w")
    history = ledger.record_attempt_end(
        history, 0, T0 + 20, vocab.Category.GPU_FALLEN_OFF_BUS, vocab.Attribution.HARDWARE)
    history = ledger.record_attempt_start(history, 1, T0 + 22)
    assert history.attempts_without_checkpoint() == 2
    assert history.attempts_without_checkpoint(upto=0) == 1
