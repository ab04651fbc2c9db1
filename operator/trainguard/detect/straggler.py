"""Straggler / throughput-drop detection over the rates that ``detect.progress`` extracts.

Place in the loop: ``detect.stream`` (live, times from the clock) and ``detect.static`` (times from
line timestamps, or the sample index when lines carry none) feed ``ThroughputTracker`` with one
series per job and ``PeerComparison`` with one series per rank. The anomaly goes to attribution;
recovery on it is off by default in the policy, detection is on.

Two readings, both with a persistence gate (Minder and Greyhound found that gate is what keeps
jitter out):

* ``ThroughputTracker``: the job's own rate falls below ``fraction`` x the median of the
  preceding baseline window and stays there for ``window`` (every sample in the run is low).
  One slow iteration (checkpoint save, eval pause, fp16 overflow skip, loss spike) is followed
  by normal samples and resets the run, so it never qualifies.
* ``PeerComparison``: where ranks report their own rate, a rank whose median over the window is
  below ``fraction`` x the median of its peers, for ``window``, is the suspect.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass

from trainguard.model import anomalies

MIN_BASELINE_SAMPLES = 5
"""Fewer baseline samples than this and no drop is judged (warm-up, or a fresh attempt)."""
MIN_LOW_SAMPLES = 3
"""A sustained drop needs at least this many low samples, whatever the window length."""
MIN_PEERS = 3
"""Peer comparison needs this many reporting series; with two, who is slow is ambiguous."""
MAX_WINDOW_SAMPLES = 512
"""Samples kept per window (the newest): a median of 512 is as good a baseline as of 50,000, and
the bound keeps each sample O(1) amortised even when timestamps jump backwards (time-of-day
stamps wrapping at midnight, interleaved ranks) and no sample ever leaves the window by age."""


@dataclass(frozen=True, slots=True)
class Drop:
    """A sustained drop: since when, how deep, and the sample that began it."""

    since: float
    baseline: float
    current: float
    first: anomalies.Evidence | None
    key: str = ""


class ThroughputTracker:
    """One throughput series (a job, or one rank). Times are any monotonic unit (s or sample index)."""

    def __init__(self, fraction: float, window: float, baseline_window: float) -> None:
        if not 0.0 < fraction < 1.0:
            raise ValueError(f"throughput drop fraction must be in (0, 1), got {fraction}")
        if window <= 0 or baseline_window <= 0:
            raise ValueError("throughput windows must be positive")
        self.fraction = fraction
        self.window = window
        self.baseline_window = baseline_window
        self._samples: deque[tuple[float, float]] = deque(maxlen=MAX_WINDOW_SAMPLES)
        self._low: deque[tuple[float, float]] = deque(maxlen=MAX_WINDOW_SAMPLES)
        self._low_since: float | None = None
        self._low_first: anomalies.Evidence | None = None
        self._baseline: float | None = None

    def add(self, at: float, rate: float, evidence: anomalies.Evidence | None = None) -> None:
        """Record one sample; the low run starts, continues or resets."""
        baseline = self._baseline if self._low else self._current_baseline(at)
        if baseline is not None and rate < self.fraction * baseline:
            if not self._low:
                self._baseline, self._low_first, self._low_since = baseline, evidence, at
            self._low.append((at, rate))
        else:
            self._low.clear()
            self._low_first, self._baseline, self._low_since = None, None, None
            self._samples.append((at, rate))
            horizon = at - self.baseline_window
            while self._samples and self._samples[0][0] < horizon:
                self._samples.popleft()

    def _current_baseline(self, at: float) -> float | None:
        values = [rate for when, rate in self._samples if when >= at - self.baseline_window]
        if len(values) < MIN_BASELINE_SAMPLES:
            return None
        return statistics.median(values)

    def drop(self, now: float) -> Drop | None:
        """The current sustained drop, if the low run has lasted ``window`` up to ``now``."""
        if len(self._low) < MIN_LOW_SAMPLES or self._baseline is None or self._low_since is None:
            return None
        since = self._low_since
        if now - since < self.window:
            return None
        current = statistics.median(rate for _, rate in self._low)
        return Drop(since=since, baseline=self._baseline, current=current, first=self._low_first)


class PeerComparison:
    """Per-rank (or per-node) rates compared with the peers' median over a sliding window."""

    def __init__(self, fraction: float, window: float) -> None:
        if not 0.0 < fraction < 1.0:
            raise ValueError(f"throughput drop fraction must be in (0, 1), got {fraction}")
        self.fraction = fraction
        self.window = window
        self._series: dict[str, deque[tuple[float, float]]] = {}
        self._low_since: dict[str, float] = {}
        self._first: dict[str, anomalies.Evidence] = {}
        self._last_evidence: dict[str, anomalies.Evidence] = {}

    def add(self, key: str, at: float, rate: float, evidence: anomalies.Evidence | None = None) -> None:
        series = self._series.setdefault(key, deque(maxlen=MAX_WINDOW_SAMPLES))
        series.append((at, rate))
        if evidence is not None:
            self._last_evidence[key] = evidence
        horizon = at - self.window
        while series and series[0][0] < horizon:
            series.popleft()

    def stragglers(self, now: float) -> list[Drop]:
        """Series slow against their peers for at least ``window``, slowest first."""
        medians = {
            key: statistics.median(rate for when, rate in series if when >= now - self.window)
            for key, series in self._series.items()
            if sum(1 for when, _ in series if when >= now - self.window) >= MIN_LOW_SAMPLES
        }
        if len(medians) < MIN_PEERS:
            return []
        found: list[Drop] = []
        for key, value in medians.items():
            peers = statistics.median(v for k, v in medians.items() if k != key)
            if peers > 0 and value < self.fraction * peers:
                since = self._low_since.setdefault(key, now)
                if key not in self._first and key in self._last_evidence:
                    self._first[key] = self._last_evidence[key]
                if now - since >= self.window:
                    found.append(Drop(since, peers, value, self._first.get(key), key))
            else:
                self._low_since.pop(key, None)
                self._first.pop(key, None)
        return sorted(found, key=lambda d: d.current / d.baseline)
