"""An attempt's crash evidence stays bounded under a flood and a large cascade, and the first cause
and culprit are still the right ones (issue 28, goal 4). Real catalog, real text."""

from __future__ import annotations

import tracemalloc

from trainguard.detect import catalog, crash, hosts, matcher, stream
from trainguard.model import anomalies, clock, signals, vocab

C = vocab.Category
XID = "gpu-7: NVRM: Xid (PCI:0000:3b:00): 79, pid=2231, name=python, GPU has fallen off the bus."
_CATALOG = catalog.load_catalog()
_MATCHER = matcher.build_matcher(_CATALOG)


def _detector(nodes: list[str], tasks_per_node: int) -> tuple[stream.WorkloadDetector, clock.ManualClock]:
    now = clock.ManualClock(start=1_700_000_000.0)
    detector = stream.WorkloadDetector(_MATCHER, stream.DetectionSettings(), now, workload="slurm/t/1", attempt=0,
                                       rank_map=hosts.RankMap(nodes, tasks_per_node))
    return detector, now


def _feed(detector: stream.WorkloadDetector, now: clock.ManualClock, lines: list[str], start: int = 1,
          per_thousand_s: float = 0.6) -> list[anomalies.Anomaly]:
    """Feed ``lines``, the clock moving ``per_thousand_s`` every 1,000 lines (0.6 s: 100,000 a minute)."""
    found: list[anomalies.Anomaly] = []
    for lineno, text in enumerate(lines, start):
        found += detector.feed(signals.LogLine(text, lineno, now.now(), "stdout"), tick=False)
        if lineno % 1000 == 0:
            now.advance(per_thousand_s)
            found += detector.tick()
    now.advance(2.0)
    return found + detector.tick()


def test_a_flood_of_identical_xid_lines_is_one_anomaly_in_bounded_memory() -> None:
    detector, now = _detector(["gpu-7"], 8)
    found = _feed(detector, now, [XID] * 10_000)
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        found += _feed(detector, now, [XID] * 90_000, start=10_001)
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(found) == 1
    assert (found[0].category, found[0].suspect_nodes) == (C.GPU_FALLEN_OFF_BUS, ["gpu-7"])
    assert len(found[0].evidence) <= crash.MAX_ANOMALY_EVIDENCE
    assert after - before < 200_000  # 90,000 more copies: counted, not kept


def test_identical_hits_keep_the_first_few_and_conclude_once() -> None:
    detector = crash.CrashDetector(settle_s=1.0, hints={})
    item = anomalies.Evidence(line=1, text=XID, pattern="xid.79_fallen_off_bus", node="gpu-7", xid=79,
                              category=C.GPU_FALLEN_OFF_BUS, severity=vocab.Severity.FATAL)
    found = []
    for n in range(100_000):
        detector.add(item.model_copy(update={"line": n + 1}), now=n * 0.0006)
        if (a := detector.conclude(n * 0.0006)) is not None:
            found.append(a)
    assert len(found) == 1 and found[0].evidence[0].line == 1
    assert len(detector.evidence) == crash.MAX_PER_KEY
    assert detector.repeats == 100_000 - crash.MAX_PER_KEY
    assert detector.window_opened is None  # no stronger cause can come of a repeat: no window reopens


def _timeout(rank: int, completed: int) -> str:
    return (f"{rank}: [rank{rank}]:[E1204 10:15:32.774120831 ProcessGroupNCCL.cpp:1709] [PG 0 Rank {rank}] "
            f"Timeout at NCCL work: 1043, last enqueued NCCL work: 1043, last completed NCCL work: {completed}.")


def _watchdog(rank: int) -> str:
    return (f"{rank}: [rank{rank}]:[E1204 10:15:32.774120831 ProcessGroupNCCL.cpp:632] [Rank {rank}] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=1043, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
            "Timeout(ms)=600000) ran for 600088 milliseconds before timing out.")


NODES = [f"gpu{i:03d}" for i in range(512)]


def test_a_4096_rank_cascade_names_the_first_cause_and_its_rank() -> None:
    detector, now = _detector(NODES, 8)
    lines = ["1234: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus.",
             "1234: [rank1234]: RuntimeError: CUDA error: unspecified launch failure"]
    for _ in range(3):  # each rank says it more than once (watchdog, what(), DistBackendError)
        lines += [text for rank in range(4096) if rank != 1234 for text in (_watchdog(rank), _timeout(rank, 1042))]
    found = _feed(detector, now, lines)
    assert len(found) == 1
    assert (found[0].category, found[0].suspect_nodes, found[0].suspect_ranks) == (
        C.GPU_FALLEN_OFF_BUS, ["gpu154"], [1234])
    assert len(found[0].evidence) <= crash.MAX_ANOMALY_EVIDENCE


def test_a_lagging_rank_among_4096_is_named_when_every_rank_repeats_its_timeout() -> None:
    detector, now = _detector(NODES, 8)
    lines = [_timeout(rank, 1041 if rank == 3001 else 1042) for rank in range(4096)] * (crash.MAX_PER_KEY + 2)
    found = _feed(detector, now, lines, per_thousand_s=0.1)  # every rank's first line within the window
    assert len(found) == 1
    assert (found[0].category, found[0].suspect_ranks, found[0].suspect_nodes) == (C.NCCL_TIMEOUT, [3001], ["gpu375"])


def test_a_retry_loop_stays_bounded_and_a_later_crash_of_the_same_text_is_found() -> None:
    """An error followed by progress is withdrawn (kept as a warning); 300 rounds of it keep a few
    lines, and the same error later, with no progress after it, is still a crash."""
    detector, now = _detector(["node1"], 1)
    error = "0: [rank0]: ValueError: batch 17 has no samples"
    lineno = 0
    for _ in range(300):
        for text in (error, "0: [rank0]: step 5 | loss 2.0 | 100.0 samples/s"):
            lineno += 1
            assert detector.feed(signals.LogLine(text, lineno, now.now(), "stdout")) == []
    found = _feed(detector, now, [error], start=lineno + 1)
    assert len(found) == 1 and found[0].category == C.PYTHON_EXCEPTION
    assert found[0].evidence[0].line == lineno + 1
    assert sum(1 for e in found[0].evidence if e.text == error) <= 2 * crash.MAX_PER_KEY + 1
