"""Hang detection: the progress signal went silent for longer than the policy's timeout.

Place in the loop: ``detect.stream`` tells ``HangDetector`` about every progress line
(``detect.progress``) and asks it on every tick; the anomaly goes to attribution like any other.

Arming choice: the timer starts at the first progress line of the attempt, not at job start.
A job whose trainer prints nothing we recognise would otherwise be called hung after the
timeout, and start-up (container pulls, dataset index builds, compile) is routinely longer
than any sensible hang timeout. The cost: a job that hangs before its first step is not
caught here (the NCCL watchdog line, a ``nccl_timeout`` hit, still is). Silence is measured
with the injected clock, so it also fires when the log stops entirely.
"""

from __future__ import annotations

from trainguard.model import anomalies, vocab

PATTERN_ID = "hang.progress_silence"
"""Evidence pattern name for a hang found by silence (not a catalog id)."""


class HangDetector:
    """Progress silence for one attempt. Reports once; re-arms if progress resumes."""

    def __init__(self, timeout_s: float) -> None:
        if timeout_s <= 0:
            raise ValueError(f"hang timeout must be positive, got {timeout_s} s")
        self.timeout_s = timeout_s
        self._last_at: float | None = None
        self._last: anomalies.Evidence | None = None
        self._reported = False

    @property
    def armed(self) -> bool:
        return self._last_at is not None

    def progress(self, at: float, evidence: anomalies.Evidence) -> None:
        """A progress line arrived at ``at`` (epoch seconds)."""
        if self._last_at is None or at >= self._last_at:
            self._last_at, self._last = at, evidence
        self._reported = False

    def silence(self, now: float) -> float:
        """Seconds since the last progress line (0 before the first one)."""
        return 0.0 if self._last_at is None else max(0.0, now - self._last_at)

    def check(self, now: float) -> anomalies.Anomaly | None:
        """A hang anomaly if progress has been silent for longer than the timeout, once per silence."""
        if self._last_at is None or self._reported or self.silence(now) <= self.timeout_s:
            return None
        self._reported = True
        silent = self.silence(now)
        evidence = []
        if self._last is not None:
            evidence.append(self._last.model_copy(update={"pattern": PATTERN_ID, "severity": vocab.Severity.INFO}))
        return anomalies.Anomaly(
            symptom=vocab.Symptom.HANG,
            category=vocab.Category.PROGRESS_STALLED,
            attribution_hint=vocab.Attribution.UNKNOWN,
            evidence=evidence,
            first_seen_at=self._last_at,
            detected_at=now,
            summary=f"no progress line for {silent:.0f} s (timeout {self.timeout_s:.0f} s); last one shown",
        )
