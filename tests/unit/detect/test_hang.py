"""Hang by progress silence, on a ManualClock (no sleeping)."""

from __future__ import annotations

import pytest

from trainguard.detect import hang
from trainguard.model import anomalies, clock, vocab


def _progress_line(n: int) -> anomalies.Evidence:
    return anomalies.Evidence(line=n, text=f"iteration {n}/1000 |", pattern="progress", severity=vocab.Severity.INFO)


def test_regular_progress_is_no_hang() -> None:
    now = clock.ManualClock()
    detector = hang.HangDetector(timeout_s=600)
    assert detector.check(now.now()) is None  # not armed before the first progress line
    for n in range(50):
        detector.progress(now.now(), _progress_line(n))
        now.advance(500)
        assert detector.check(now.now()) is None
    assert detector.silence(now.now()) == 500


def test_hang_reported_after_timeout_and_rearmed_by_progress() -> None:
    now = clock.ManualClock()
    detector = hang.HangDetector(timeout_s=600)
    detector.progress(now.now(), _progress_line(1))
    now.advance(600)
    assert detector.check(now.now()) is None  # exactly the timeout is not yet a hang
    now.advance(1)
    found = detector.check(now.now())
    assert found is not None
    assert (found.symptom, found.category) == (vocab.Symptom.HANG, vocab.Category.PROGRESS_STALLED)
    assert found.evidence[0].line == 1
    assert found.evidence[0].pattern == hang.PATTERN_ID
    assert detector.check(now.now() + 1000) is None  # once per silence
    detector.progress(now.now(), _progress_line(2))
    now.advance(700)
    again = detector.check(now.now())
    assert again is not None
    assert again.evidence[0].line == 2


def test_never_armed_never_hangs() -> None:
    detector = hang.HangDetector(timeout_s=1)
    assert detector.check(1e12) is None
    with pytest.raises(ValueError, match="positive"):
        hang.HangDetector(timeout_s=0)
