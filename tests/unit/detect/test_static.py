"""Whole-file analysis: verdicts, bad input, long lines, streaming reads."""

from __future__ import annotations

import io

from trainguard.detect import catalog, matcher, static, stream
from trainguard.model import patterns, vocab

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
        id="test.oom",
        category=vocab.Category.OOM_GPU,
        attribution_hint=vocab.Attribution.APPLICATION,
        severity=vocab.Severity.FATAL,
        regex="CUDA out of memory",
    ),
    patterns.PatternSpec(
        id="test.pyexc",
        category=vocab.Category.PYTHON_EXCEPTION,
        attribution_hint=vocab.Attribution.APPLICATION,
        severity=vocab.Severity.ERROR,
        regex=r"(Error|Exception): ",
    ),
]


def analyze(data: bytes, settings: stream.DetectionSettings | None = None) -> static.Result:
    compiled = matcher.build_matcher(catalog.Catalog(version="t", patterns=tuple(SPECS)), engine="python")
    return static.FileAnalyzer(compiled, settings or stream.DetectionSettings()).analyze("f.log", io.BytesIO(data))


def lines(*items: str) -> bytes:
    return ("\n".join(items) + "\n").encode()


def test_crash_with_suspects_from_banner() -> None:
    result = analyze(
        lines(
            "[rank3]:node2:100:100 [3] NCCL INFO comm 0x1 rank 3 nranks 4 cudaDev 3 - Init COMPLETE",
            "[rank3]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
            "[rank0]:[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5)",
        )
    )
    assert (result.symptom, result.category, result.attribution) == (
        vocab.Symptom.CRASH,
        vocab.Category.OOM_GPU,
        vocab.Attribution.APPLICATION,
    )
    assert (result.suspect_nodes, result.suspect_ranks) == (["node2"], [3])
    out = result.to_json(max_evidence=1)
    assert out["evidence"] == [
        {
            "line": 2,
            "text": "[rank3]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
            "pattern": "test.oom",
        }
    ]


def test_watchdog_only_is_a_hang() -> None:
    result = analyze(lines("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5)"))
    assert (result.symptom, result.category) == (vocab.Symptom.HANG, vocab.Category.NCCL_TIMEOUT)


def test_error_followed_by_steady_progress_survived() -> None:
    progress = [f"step {i} | loss 2.0 | tokens/s: 1000" for i in range(10)]
    result = analyze(lines(*progress[:3], "ConnectionError: retrying in 10 s", *progress[3:]))
    assert result.symptom == vocab.Symptom.HEALTHY
    assert [c.line for c in result.context] == [4]
    short = analyze(lines(*progress[:3], "ConnectionError: retrying in 10 s", *progress[3:5]))
    assert short.symptom == vocab.Symptom.CRASH


def test_straggler_without_timestamps_uses_sample_order() -> None:
    rates = [1000.0] * 30 + [300.0] * 10
    result = analyze(lines(*(f"step {i} | tokens/s: {r}" for i, r in enumerate(rates))))
    assert (result.symptom, result.category) == (vocab.Symptom.STRAGGLER, vocab.Category.THROUGHPUT_DROP)
    assert result.evidence[0].line == 31
    spike = analyze(lines(*(f"step {i} | tokens/s: {50.0 if i == 20 else 1000.0}" for i in range(40))))
    assert spike.symptom == vocab.Symptom.HEALTHY


def test_bad_bytes_ansi_cr_and_huge_line() -> None:
    data = (
        b"\x00\xff\xfe\xc3\x28 junk\n"
        b"\x1b[31m[Rank 2] Watchdog caught\x1b[0m collective operation timeout\n"
        + b"\r".join(b"%d/10 [00:01<00:09, 1.0it/s]" % i for i in range(10))
        + b"\n"
        + b"y" * (10 * 1024 * 1024)
        + b"\n"
        + b"last line without newline"
    )
    result = analyze(data)
    assert result.lines == 5
    assert (result.symptom, result.suspect_ranks) == (vocab.Symptom.HANG, [])
    assert result.evidence[0].text == "[Rank 2] Watchdog caught collective operation timeout"


def test_read_lines_bounds_memory() -> None:
    data = b"a" * 5000 + b"\nshort\n" + b"b" * 2500
    got = list(static.read_lines(io.BytesIO(data), max_line_bytes=1000))
    assert [len(x) for x in got] == [1000 + 5 + 1000, 6, 1000 + 5 + 1000]
    assert got[1] == b"short\n"


def test_empty_file_is_healthy() -> None:
    result = analyze(b"")
    assert (result.symptom, result.category, result.attribution, result.lines) == (
        vocab.Symptom.HEALTHY,
        vocab.Category.NONE,
        vocab.Attribution.NONE,
        0,
    )


def test_one_slow_rank_beside_rank_zeros_job_line() -> None:
    """Rank 0 prints the job's rate (which holds) and its own; rank 2's own rate falls. Without
    timestamps each series counts its own samples, so rank 0's two lines per step must not be one
    series running ahead of the others (it made the file look healthy)."""
    text = []
    for step in range(1, 121):
        text.append(f"0: [rank0]: step {step}/120 | loss 0.2 | 1200.0 samples/s | elapsed/iter 104.1 ms")
        for rank in range(4):
            rate = 120.0 if rank == 2 and step >= 40 else 317.0
            text.append(f"{rank}: [rank{rank}]: local step {step} | {rate:.1f} samples/s | compute 100.9 ms/iter")
    result = analyze("\n".join(text).encode())
    assert (result.symptom, result.suspect_ranks) == (vocab.Symptom.STRAGGLER, [2])
