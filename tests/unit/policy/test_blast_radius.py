"""Blast-radius breaker: actions per rolling hour and share of the partition we drained."""

from __future__ import annotations

from trainguard.model import advice, vocab
from trainguard.policy import blast_radius, model

NOW = 1_700_000_000.0


def _advice(action: vocab.AdviceAction = vocab.AdviceAction.REQUEUE, drain: list[str] | None = None) -> advice.Advice:
    return advice.Advice(workload="w", attempt=0, generation=1, action=action, drain_nodes=drain or [])


def _spec(per_hour: int = 20, share: float = 0.1) -> model.RecoveryPolicySpec:
    return model.RecoveryPolicySpec(
        blast_radius=model.BlastRadius(max_actions_per_hour=per_hour, max_drained_share=share)
    )


def test_nothing_to_do_is_never_blocked() -> None:
    assert (
        blast_radius.check(
            _spec(per_hour=0),
            advice=_advice(vocab.AdviceAction.NONE),
            recent_actions=[],
            partition_nodes=0,
            drained_by_us=0,
            now=NOW,
        )
        is None
    )


def test_actions_per_hour_counts_only_the_last_hour() -> None:
    recent = [(NOW - 3600.0, "requeue"), (NOW - 3599.0, "requeue"), (NOW - 10, "stop")]
    allowed = blast_radius.check(
        _spec(per_hour=3), advice=_advice(), recent_actions=recent, partition_nodes=10, drained_by_us=0, now=NOW
    )
    assert allowed is None
    blocked = blast_radius.check(
        _spec(per_hour=2), advice=_advice(), recent_actions=recent, partition_nodes=10, drained_by_us=0, now=NOW
    )
    assert blocked == "blast radius: 2 operations in the last hour + 1 planned > maxActionsPerHour 2"


def test_future_entries_are_ignored() -> None:
    reason = blast_radius.check(
        _spec(per_hour=1),
        advice=_advice(),
        recent_actions=[(NOW + 5, "requeue")],
        partition_nodes=10,
        drained_by_us=0,
        now=NOW,
    )
    assert reason is None


def test_zero_per_hour_blocks_everything() -> None:
    reason = blast_radius.check(
        _spec(per_hour=0),
        advice=_advice(vocab.AdviceAction.STOP),
        recent_actions=[],
        partition_nodes=10,
        drained_by_us=0,
        now=NOW,
    )
    assert reason is not None and "maxActionsPerHour 0" in reason


def test_drains_count_as_operations_and_against_the_share() -> None:
    assert blast_radius.planned_operations(_advice(drain=["n1", "n2"])) == 3
    ok = blast_radius.check(
        _spec(share=0.2), advice=_advice(drain=["n1"]), recent_actions=[], partition_nodes=10, drained_by_us=1, now=NOW
    )
    assert ok is None
    too_many = blast_radius.check(
        _spec(share=0.2), advice=_advice(drain=["n1"]), recent_actions=[], partition_nodes=10, drained_by_us=2, now=NOW
    )
    assert too_many is not None and "3 of 10 nodes (30%)" in too_many and "maxDrainedShare 20%" in too_many


def test_unknown_partition_size_blocks_drains_only() -> None:
    reason = blast_radius.check(
        _spec(), advice=_advice(drain=["n1"]), recent_actions=[], partition_nodes=0, drained_by_us=0, now=NOW
    )
    assert reason == "blast radius: partition size unknown, no node may be drained"
    assert (
        blast_radius.check(_spec(), advice=_advice(), recent_actions=[], partition_nodes=0, drained_by_us=0, now=NOW)
        is None
    )
