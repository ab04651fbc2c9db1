"""Whole-file analysis keeps bounded memory on huge logs, and still reads them right."""

from __future__ import annotations

import io

import pytest

from trainguard.detect import catalog, matcher, static, stream
from trainguard.model import vocab


@pytest.fixture(scope="module")
def compiled() -> matcher.Matcher:
    return matcher.build_matcher(catalog.load_builtin(), engine="python")


def analyze(compiled: matcher.Matcher, lines: list[str]) -> static.Result:
    data = ("\n".join(lines) + "\n").encode()
    return static.FileAnalyzer(compiled, stream.DetectionSettings()).analyze("big.log", io.BytesIO(data))


def test_thinned_progress_series_still_shows_a_sustained_drop(
    compiled: matcher.Matcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(static, "MAX_SAMPLES", 40)
    fast = [f"step {i} loss 2.0 tokens/s: 1000" for i in range(600)]
    slow = [f"step {i} loss 2.0 tokens/s: 200" for i in range(600, 1200)]
    result = analyze(compiled, fast + slow)
    assert (result.symptom, result.category) == (vocab.Symptom.STRAGGLER, vocab.Category.THROUGHPUT_DROP)


def test_thinned_steady_series_stays_healthy(compiled: matcher.Matcher, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(static, "MAX_SAMPLES", 40)
    result = analyze(compiled, [f"step {i} loss 2.0 tokens/s: {1000 + (i % 7)}" for i in range(1200)])
    assert result.symptom == vocab.Symptom.HEALTHY


def test_repeated_lines_are_capped_and_the_first_cause_survives(
    compiled: matcher.Matcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(static, "MAX_HITS_PER_PATTERN", 3)
    timeouts = [
        f"[rank{r}]:[E ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation timeout: "
        f"WorkNCCL(SeqNum=52, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600034 "
        "milliseconds before timing out."
        for r in range(1, 50)
    ]
    xid = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
    result = analyze(compiled, [xid, *timeouts])
    assert result.category == vocab.Category.GPU_FALLEN_OFF_BUS
    assert len(result.evidence) <= 1 + 3 * len(compiled.catalog.patterns)
    assert sum(1 for e in result.evidence if e.category == vocab.Category.NCCL_TIMEOUT) <= 3
