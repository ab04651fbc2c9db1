"""A job-wide slowdown named by the rank whose own compute rate fell (two ranks: no peers' median).

Synchronous data parallel: one rank's compute per iteration rises fourfold, every rank's step slows
(the others wait in all-reduce), so the job's rate falls while only that rank's own rate does. The
live detector must name it even when the job has two ranks, too few for ``PeerComparison``'s median
of the others (issue 23: the anomaly named nobody and the requeue went back onto the slow node).
The lines are the test workload's (tests/workloads/train.py), fed the way the engine does: a round
of lines, then one tick.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from trainguard.detect import catalog, hosts, matcher, straggler, stream
from trainguard.model import anomalies, clock, signals

BATCH = 32
NODES = ["n1", "n2", "n3", "n4"]


def _lines(step: int, world: int, compute_ms: Callable[[int], float], step_ms: float) -> list[str]:
    """One logging step of train.py: rank 0's job-wide line, then every rank's own line."""
    job_rate = BATCH * world * 1000.0 / step_ms
    lines = [f"0: [rank0]: step {step}/900 | loss 0.0981 | {job_rate:.1f} samples/s | elapsed/iter {step_ms:.1f} ms"]
    for rank in range(world):
        ms = compute_ms(rank)
        lines.append(
            f"{rank}: [rank{rank}]: local step {step} | {BATCH * 1000.0 / ms:.1f} samples/s | compute {ms:.1f} ms/iter"
            f" | allreduce+backward {max(step_ms - ms, 1.0):.1f} ms/iter"
        )
    return lines


def _run(
    world: int,
    compute_ms: Callable[[int, bool], float],
    step_ms: Callable[[bool], float],
    healthy_rounds: frozenset[int] = frozenset(),
) -> list[anomalies.Anomaly]:
    """180 logging rounds 2 s apart, the slowdown from round 60 on (except ``healthy_rounds``, where
    the job line alone is back at full speed); a window of 30 s."""
    now = clock.ManualClock(start=1_800_000_000.0)
    detector = stream.WorkloadDetector(
        matcher.build_matcher(catalog.Catalog(version="test", patterns=()), engine="python"),
        stream.DetectionSettings(throughput_window_s=30, baseline_window_s=600),
        now,
        workload="slurm/test/7",
        attempt=0,
        rank_map=hosts.RankMap(NODES[:world], tasks_per_node=1),
    )
    found: list[anomalies.Anomaly] = []
    lineno = 0
    for round_ in range(180):
        slow = round_ >= 60
        ms = {rank: compute_ms(rank, slow) for rank in range(world)}
        for text in _lines(round_ * 5, world, ms.__getitem__, step_ms(slow and round_ not in healthy_rounds)):
            lineno += 1
            line = signals.LogLine(text=text, lineno=lineno, received_at=now.now(), source="stdout")
            found += detector.feed(line, tick=False)
        found += detector.tick()
        now.advance(2.0)
    return found


def _rank_slow(slow_rank: int) -> Callable[[int, bool], float]:
    return lambda rank, slow: 400.0 if slow and rank == slow_rank else 100.0


def _step(slow: bool) -> float:
    return 405.0 if slow else 105.0


@pytest.mark.parametrize(("world", "slow_rank"), [(2, 1), (2, 0)])
def test_two_ranks_the_one_whose_compute_rose_is_named(world: int, slow_rank: int) -> None:
    found = _run(world, _rank_slow(slow_rank), _step)
    assert [(a.suspect_ranks, a.suspect_nodes) for a in found] == [([slow_rank], [NODES[slow_rank]])]
    named = [e for e in found[0].evidence if e.rank == slow_rank and "local step" in e.text]
    assert named and named[0].node == NODES[slow_rank], found[0].evidence
    assert f"below its own rate before the drop, its peers' held: rank:{slow_rank}" in found[0].summary


def test_a_job_rate_sample_back_at_speed_mid_drop_does_not_hide_the_slow_rank() -> None:
    """One job-rate line at full speed 24 s into the drop restarts its persistence; by then the slow
    rank's own window is all slow, so its level before the drop must be the one kept from before the
    first low run, not a fresh reading taken at the reset."""
    found = _run(2, _rank_slow(1), _step, healthy_rounds=frozenset({72}))
    assert [(a.suspect_ranks, a.suspect_nodes) for a in found] == [([1], ["n2"])]


def test_more_ranks_are_still_named_by_their_peers() -> None:
    """Three or more ranks: the peers' median names the rank, as before (the summary says so)."""
    found = _run(4, _rank_slow(2), _step)
    assert [(a.suspect_ranks, a.suspect_nodes) for a in found] == [([2], ["n3"])]
    assert "below its peers: rank:2" in found[0].summary


def test_two_ranks_whose_compute_holds_name_nobody() -> None:
    """The job slows but neither rank's own compute does (the time goes to a slower network)."""
    found = _run(2, lambda rank, slow: 100.0, _step)
    assert [(a.suspect_ranks, a.suspect_nodes) for a in found] == [([], [])]


def test_two_ranks_whose_compute_both_rose_name_nobody() -> None:
    """Both ranks' compute rose alike (the job's own slowdown, e.g. its input pipeline): no rank is behind."""
    found = _run(2, lambda rank, slow: 400.0 if slow else 100.0, _step)
    assert [(a.suspect_ranks, a.suspect_nodes) for a in found] == [([], [])]


def test_fell_from_needs_peers_that_held() -> None:
    """A series alone in its shape, or one of two that both fell, is not named; one of two that fell is."""
    peers = straggler.PeerComparison(fraction=0.5, window=10)
    for second in range(10):
        for key, rate in (("rank:0", 300.0), ("rank:1", 300.0)):
            peers.add(key, float(second), rate, group="local")
        peers.add("rank:0", float(second), 1200.0, group="job")
    peers.slow_now(9.0)
    before = peers.levels
    for second in range(20, 30):
        for key, rate in (("rank:0", 300.0), ("rank:1", 80.0)):
            peers.add(key, float(second), rate, group="local")
        peers.add("rank:0", float(second), 300.0, group="job")
    peers.slow_now(29.0)
    assert [(d.key, d.baseline, d.current) for d in peers.fell_from(before, 20.0)] == [("rank:1", 300.0, 80.0)]
    for second in range(40, 50):
        for key in ("rank:0", "rank:1"):
            peers.add(key, float(second), 80.0, group="local")
    peers.slow_now(49.0)
    assert peers.fell_from(before, 40.0) == []
