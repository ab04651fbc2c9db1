"""WorkloadDetector over timed streams with a ManualClock and the real matcher (python engine)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from trainguard.detect import catalog, hosts, matcher, straggler, stream
from trainguard.model import anomalies, clock, patterns, signals, vocab, workloads

SPECS = [
    patterns.PatternSpec(
        id="test.watchdog",
        category=vocab.Category.NCCL_TIMEOUT,
        attribution_hint=vocab.Attribution.UNKNOWN,
        severity=vocab.Severity.ERROR,
        regex="Watchdog caught collective operation timeout",
        extract={"rank": r"\[Rank (\d+)\]"},
    ),
    patterns.PatternSpec(
        id="test.illegal",
        category=vocab.Category.CUDA_ILLEGAL_MEMORY,
        attribution_hint=vocab.Attribution.APPLICATION,
        severity=vocab.Severity.FATAL,
        regex="an illegal memory access was encountered",
    ),
    patterns.PatternSpec(
        id="test.xid79",
        category=vocab.Category.GPU_FALLEN_OFF_BUS,
        attribution_hint=vocab.Attribution.HARDWARE,
        severity=vocab.Severity.FATAL,
        regex=r"Xid \(PCI:[0-9a-f:]+\): 79",
    ),
    patterns.PatternSpec(
        id="test.pyexc",
        category=vocab.Category.PYTHON_EXCEPTION,
        attribution_hint=vocab.Attribution.APPLICATION,
        severity=vocab.Severity.ERROR,
        regex=r"(Error|Exception): ",
    ),
]


def make(
    settings: stream.DetectionSettings | None = None, rank_map: hosts.RankMap | None = None
) -> tuple[stream.WorkloadDetector, clock.ManualClock]:
    cat = catalog.Catalog(version="test", patterns=tuple(SPECS))
    now = clock.ManualClock(start=1_700_000_000.0)
    detector = stream.WorkloadDetector(
        matcher.build_matcher(cat, engine="python"),
        settings or stream.DetectionSettings(),
        now,
        workload="slurm/test/42",
        attempt=0,
        rank_map=rank_map,
    )
    return detector, now


class Feeder:
    def __init__(self, detector: stream.WorkloadDetector, now: clock.ManualClock) -> None:
        self.detector, self.now, self.lineno = detector, now, 0

    def __call__(self, text: str) -> list[object]:
        self.lineno += 1
        line = signals.LogLine(text=text, lineno=self.lineno, received_at=self.now.now(), source="stdout")
        return list(self.detector.feed(line))


def megatron(it: int, ms: float) -> str:
    return f"0:  iteration {it:>8}/  100000 | elapsed time per iteration (ms): {ms:.1f} | lm loss: 2.1E+00 |"


def test_cascade_is_collected_then_one_crash_naming_the_first_cause() -> None:
    detector, now = make(rank_map=hosts.RankMap(["n1", "n2"], tasks_per_node=8))
    feed = Feeder(detector, now)
    for it in range(5):
        assert feed(megatron(it * 10, 1000.0)) == []
        now.advance(10)
    assert feed("11: RuntimeError: CUDA error: an illegal memory access was encountered") == []
    now.advance(0.5)
    for rank in (0, 1, 2):
        assert feed(f"{rank}: [Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9)") == []
    now.advance(0.5)
    found = detector.tick()
    assert len(found) == 1
    anomaly = found[0]
    assert (anomaly.symptom, anomaly.category, anomaly.attribution_hint) == (
        vocab.Symptom.CRASH,
        vocab.Category.CUDA_ILLEGAL_MEMORY,
        vocab.Attribution.APPLICATION,
    )
    assert (anomaly.suspect_nodes, anomaly.suspect_ranks) == (["n2"], [11])
    assert [e.line for e in anomaly.evidence][:1] == [6]
    now.advance(5)
    assert detector.tick() == []  # once per attempt
    assert feed("May 07 14:20:11 n2 kernel: NVRM: Xid (PCI:0000:2a:00): 79, GPU has fallen off the bus.") == []
    now.advance(1)
    upgraded = detector.tick()
    assert [a.category for a in upgraded] == [vocab.Category.GPU_FALLEN_OFF_BUS]
    assert upgraded[0].suspect_nodes == ["n2"]


def test_hang_by_silence_after_progress() -> None:
    detector, now = make(stream.DetectionSettings(hang_timeout_s=600))
    feed = Feeder(detector, now)
    now.advance(3600)
    assert detector.tick() == []  # no progress line yet: not armed
    for it in range(3):
        feed(megatron(it, 1000.0))
        now.advance(60)
    now.advance(500)
    assert detector.tick() == []
    now.advance(61)
    found = detector.tick()
    assert [(a.symptom, a.category) for a in found] == [(vocab.Symptom.HANG, vocab.Category.PROGRESS_STALLED)]
    assert detector.tick() == []


def test_job_wide_throughput_drop_is_a_straggler() -> None:
    detector, now = make(stream.DetectionSettings(throughput_window_s=300, baseline_window_s=1800))
    feed = Feeder(detector, now)
    found: list[object] = []
    for it in range(200):
        ms = 1000.0 if it < 100 else 2600.0
        found += feed(megatron(it, ms))
        found += detector.tick()
        now.advance(ms / 1000.0 * 10)
    kinds = [(a.symptom, a.category) for a in found]  # type: ignore[attr-defined]
    assert kinds == [(vocab.Symptom.STRAGGLER, vocab.Category.THROUGHPUT_DROP)]


def test_one_slow_rank_is_named() -> None:
    detector, now = make(stream.DetectionSettings(throughput_window_s=120), rank_map=hosts.RankMap(["a", "b"], 4))
    feed = Feeder(detector, now)
    found: list[object] = []
    for step in range(100):
        for rank in range(8):
            rate = 150.0 if rank == 6 and step >= 30 else 400.0
            found += feed(f"[rank{rank}]:step {step} | samples/sec: {rate}")
        found += detector.tick()
        now.advance(5)
    assert len(found) == 1
    anomaly = found[0]
    assert anomaly.suspect_ranks == [6]  # type: ignore[attr-defined]
    assert anomaly.suspect_nodes == ["b"]  # type: ignore[attr-defined]


def test_error_followed_by_progress_within_the_window_is_withdrawn() -> None:
    detector, now = make(stream.DetectionSettings(settle_s=30))
    feed = Feeder(detector, now)
    feed(megatron(1, 1000.0))
    feed("0: requests.exceptions.ConnectionError: Max retries exceeded with url: /shard-1.tar")
    now.advance(10)
    feed(megatron(2, 1000.0))
    now.advance(60)
    assert detector.tick() == []


def test_failed_exit_without_log_evidence_is_a_crash() -> None:
    detector, now = make()
    feed = Feeder(detector, now)
    feed(megatron(1, 1000.0))
    snapshot = workloads.JobSnapshot(
        workload="slurm/test/42", job_id="42", state=workloads.JobState.FAILED, exit_code=0, exit_signal=9
    )
    found = detector.on_exit(snapshot)
    assert [(a.symptom, a.category, a.attribution_hint) for a in found] == [
        (vocab.Symptom.CRASH, vocab.Category.PROCESS_SIGNAL_KILLED, vocab.Attribution.UNKNOWN)
    ]
    assert detector.on_exit(snapshot) == []
    assert detector.tick() == []


def test_exit_concludes_an_open_window_and_completed_is_quiet() -> None:
    detector, now = make()
    feed = Feeder(detector, now)
    feed("[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered")
    done = workloads.JobSnapshot(workload="w", job_id="1", state=workloads.JobState.FAILED, exit_code=1)
    found = detector.on_exit(done)
    assert [a.category for a in found] == [vocab.Category.CUDA_ILLEGAL_MEMORY]
    quiet, _ = make()
    assert (
        quiet.on_exit(workloads.JobSnapshot(workload="w", job_id="2", state=workloads.JobState.COMPLETED, exit_code=0))
        == []
    )


def _workload_lines(step: int, job_rate: float, local: dict[int, float], world: int = 4) -> list[str]:
    """One logging step of the test workload: rank 0's job-wide line, then every rank's own line."""
    lines = [f"0: [rank0]: step {step}/500 | loss 0.2435 | {job_rate:.1f} samples/s | elapsed/iter 104.1 ms"]
    for rank in range(world):
        rate = local.get(rank, 317.0)
        lines.append(
            f"{rank}: [rank{rank}]: local step {step} | {rate:.1f} samples/s | compute {32000 / rate:.1f} ms/iter"
            " | allreduce+backward 3.1 ms/iter"
        )
    return lines


def _run_workload(job: Callable[[int], float], local: Callable[[int], dict[int, float]]) -> list[anomalies.Anomaly]:
    detector, now = make(
        stream.DetectionSettings(throughput_window_s=120, baseline_window_s=600),
        rank_map=hosts.RankMap(["n1", "n2", "n3", "n4"], tasks_per_node=1),
    )
    feed = Feeder(detector, now)
    found: list[anomalies.Anomaly] = []
    for step in range(120):
        for text in _workload_lines(step, job(step), local(step)):
            found += feed(text)
        found += detector.tick()
        now.advance(5)
    return found  # type: ignore[return-value]


def test_slow_rank_zero_is_named_while_its_job_wide_line_holds() -> None:
    """Rank 0 prints the job's rate and its own: a drop in its own rate alone is still a straggler,
    and the anomaly (not only a later verdict) names the rank and its node."""
    found = _run_workload(lambda step: 1200.0, lambda step: {0: 120.0} if step >= 30 else {})
    assert len(found) == 1
    anomaly = found[0]
    assert (anomaly.symptom, anomaly.suspect_ranks, anomaly.suspect_nodes) == (vocab.Symptom.STRAGGLER, [0], ["n1"])
    assert anomaly.evidence[0].node == "n1" and anomaly.evidence[0].text.startswith("0: [rank0]: local step")


def test_job_wide_drop_seen_only_in_the_job_line_is_a_straggler() -> None:
    """The ranks' own compute rates hold (the time goes to a slower network), rank 0's job rate falls:
    the job-wide drop is found, and no rank is named since none is slower than its peers."""
    found = _run_workload(lambda step: 480.0 if step >= 30 else 1200.0, lambda step: {})
    assert [(a.symptom, a.suspect_ranks) for a in found] == [(vocab.Symptom.STRAGGLER, [])]


def test_job_wide_drop_names_the_rank_whose_compute_rose() -> None:
    """The whole job slows and one rank's own compute rate falls: one anomaly, naming that rank and node."""
    found = _run_workload(
        lambda step: 480.0 if step >= 30 else 1200.0, lambda step: {2: 120.0} if step >= 30 else {}
    )
    assert [(a.suspect_ranks, a.suspect_nodes) for a in found] == [([2], ["n3"])]
    assert any(e.rank == 2 and e.node == "n3" for e in found[0].evidence)


def test_ranks_are_compared_at_most_once_per_clock_second(monkeypatch: pytest.MonkeyPatch) -> None:
    """feed() ticks on every line: 4096 ranks' lines arriving together cost one peer comparison, not
    one per line (each comparison walks every rank)."""
    calls: list[float] = []
    original = straggler.PeerComparison.stragglers

    def counted(self: straggler.PeerComparison, now: float) -> list[straggler.Drop]:
        calls.append(now)
        return original(self, now)

    monkeypatch.setattr(straggler.PeerComparison, "stragglers", counted)
    detector, now = make()
    feed = Feeder(detector, now)
    for _ in range(3):
        for rank in range(4096):
            feed(f"[rank{rank}]:step 7 | samples/sec: 400.0")
        detector.tick()
        now.advance(5)
    assert len(calls) == 3
