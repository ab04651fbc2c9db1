"""Throughput drop against the job's own baseline and against peers; explicit timestamps."""

from __future__ import annotations

import statistics

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


def test_line_shape_keeps_the_kind_of_line_and_drops_numbers_and_names() -> None:
    job = straggler.line_shape("0: [rank0]: step 10/200 | loss 0.24 | 614.5 samples/s | elapsed/iter 104.1 ms")
    own = straggler.line_shape("0: [rank0]: local step 10 | 317.0 samples/s | compute 100.9 ms/iter")
    other = straggler.line_shape("13: [rank13]: local step 990 | 12.5 samples/s | compute 2100.0 ms/iter")
    nccl = straggler.line_shape("gpu-b07:4100:4100 [3] local step 990 | 12.5 samples/s | compute 2100.0 ms/iter")
    assert job != own
    assert own == other == nccl


def test_peers_are_compared_within_one_line_shape() -> None:
    """Rank 0's job-wide line is its own series: a slow rank 0 is found though that line holds."""
    peers = straggler.PeerComparison(fraction=0.5, window=60)
    found: list[straggler.Drop] = []
    for second in range(0, 300, 5):
        peers.add("rank:0", float(second), 1200.0, group="job")
        for rank in range(4):
            peers.add(f"rank:{rank}", float(second), 120.0 if rank == 0 and second >= 60 else 317.0, group="own")
        found = peers.stragglers(float(second)) or found
    assert [d.key for d in found] == ["rank:0"]


def test_thousands_of_ranks_keep_bounded_windows_and_find_the_straggler() -> None:
    """4096 ranks: the slow one is named; each window holds at most MAX_WINDOW_SAMPLES samples and a
    rank that stops reporting is forgotten once its samples leave the window."""
    peers = straggler.PeerComparison(fraction=0.5, window=60)
    found: list[straggler.Drop] = []
    for second in range(0, 150, 10):
        for rank in range(4096):
            if rank == 7 and second >= 60:
                continue  # rank 7 stops reporting (a crash is another detector's business)
            peers.add(f"rank:{rank}", float(second), 40.0 if rank == 3001 and second >= 50 else 400.0)
        found = peers.stragglers(float(second)) or found
    assert [d.key for d in found] == ["rank:3001"]
    assert peers.series_count() == 4095
    slow = peers.slow_now(140.0)
    assert [d.key for d in slow] == ["rank:3001"] and slow[0].baseline == pytest.approx(400.0)


def test_window_never_holds_more_than_its_bound() -> None:
    peers = straggler.PeerComparison(fraction=0.5, window=1e9)
    for index in range(3 * straggler.MAX_WINDOW_SAMPLES):
        peers.add("rank:0", float(index), float(index % 7))
    assert peers.series_count() == 1
    assert max(len(w.samples) for w in peers._series.values()) == straggler.MAX_WINDOW_SAMPLES


def test_a_full_window_holds_its_samples_in_a_few_bytes_each() -> None:
    """An engine with 10,000 workloads holds a window or two per workload: a full window must stay
    small (flat arrays of doubles, about 24 bytes a sample; tuples of float objects took ~120)."""
    import tracemalloc

    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        windows = []
        for _k in range(50):
            window = straggler._Window()
            for i in range(straggler.MAX_WINDOW_SAMPLES):
                window.add(1_800_000_000.0 + i, 1000.0 + (i * 7919 % 113) / 7)
            windows.append(window)
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (after - before) / len(windows) < 20_000
    assert windows[0].median() == statistics.median(windows[0].rates)
