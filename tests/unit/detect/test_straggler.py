"""Throughput drop against the job's own baseline and against peers; explicit timestamps."""

from __future__ import annotations

import pytest

from trainguard.detect import straggler


def _feed(tracker: straggler.ThroughputTracker, rates: list[float], every: float = 10.0) -> float:
    at = 0.0
    for rate in rates:
        at += every
        tracker.add(at, rate)
    return at


def test_sustained_drop_is_found_after_the_window() -> None:
    tracker = straggler.ThroughputTracker(fraction=0.5, window=300, baseline_window=1800)
    end = _feed(tracker, [1.0] * 60 + [0.4] * 20)  # 200 s of low samples
    assert tracker.drop(end) is None  # not sustained for 300 s yet
    end = _feed_from(tracker, end, [0.4] * 12)
    found = tracker.drop(end)
    assert found is not None
    assert found.baseline == pytest.approx(1.0)
    assert found.current == pytest.approx(0.4)
    assert found.since == pytest.approx(610.0)


def _feed_from(tracker: straggler.ThroughputTracker, start: float, rates: list[float]) -> float:
    at = start
    for rate in rates:
        at += 10.0
        tracker.add(at, rate)
    return at


@pytest.mark.parametrize(
    "dips",
    [
        [0.05] + [1.0] * 30,  # a checkpoint save: one very slow iteration
        [0.3, 1.0] * 30,  # eval pauses between normal iterations
        [0.6, 0.7, 0.55] * 20,  # a sustained 30-45 % dip stays above the 50 % line
    ],
)
def test_short_or_shallow_dips_are_not_stragglers(dips: list[float]) -> None:
    tracker = straggler.ThroughputTracker(fraction=0.5, window=30, baseline_window=1800)
    end = _feed(tracker, [1.0] * 30 + dips)
    assert tracker.drop(end) is None


def test_no_baseline_no_verdict() -> None:
    tracker = straggler.ThroughputTracker(fraction=0.5, window=10, baseline_window=1800)
    end = _feed(tracker, [1.0, 1.0, 0.1, 0.1, 0.1, 0.1, 0.1])
    assert tracker.drop(end) is None  # warm-up: fewer than MIN_BASELINE_SAMPLES before the drop
    with pytest.raises(ValueError, match="fraction"):
        straggler.ThroughputTracker(fraction=1.5, window=1, baseline_window=1)


def test_one_slow_rank_among_peers() -> None:
    peers = straggler.PeerComparison(fraction=0.5, window=60)
    found: list[straggler.Drop] = []
    for second in range(0, 300, 5):
        for rank in range(8):
            rate = 150.0 if rank == 5 and second >= 60 else 400.0
            peers.add(f"rank:{rank}", float(second), rate)
        found = peers.stragglers(float(second)) or found
    assert [d.key for d in found] == ["rank:5"]
    assert found[0].current == pytest.approx(150.0)


def test_peers_need_three_series_and_persistence() -> None:
    peers = straggler.PeerComparison(fraction=0.5, window=60)
    for second in range(0, 120, 5):
        peers.add("rank:0", float(second), 400.0)
        peers.add("rank:1", float(second), 100.0)
    assert peers.stragglers(120.0) == []  # two series: who is slow is ambiguous
    peers.add("rank:2", 120.0, 400.0)
    for second in (121.0, 122.0):
        peers.add("rank:2", second, 400.0)
    assert peers.stragglers(122.0) == []  # low now, but not yet for the whole window


def test_timestamps_that_jump_backwards_still_give_a_bounded_baseline() -> None:
    """Time-of-day stamps wrap (midnight, interleaved ranks): no sample leaves the window by age,
    yet the baseline stays the recent median and a sustained drop is still found."""
    tracker = straggler.ThroughputTracker(0.5, 30.0, 300.0)
    for index in range(5000):
        tracker.add(float(index % 100), 1000.0)
    drop = None
    for index in range(5000, 5100):
        tracker.add(float(index - 5000), 100.0)
        drop = tracker.drop(float(index - 5000)) or drop
    assert drop is not None
    assert drop.baseline == 1000.0
