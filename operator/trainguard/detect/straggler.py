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
  below ``fraction`` x the median of its peers, for ``window``, is the suspect. Only lines of one
  shape are compared (``line_shape``: a rank's own line, not rank 0's job-wide one), so a single
  slow rank is found while the job-level rate holds, rank 0 included. ``slow_now`` names the rank
  behind a job-wide drop that ``ThroughputTracker`` already found persistent.
* Own earlier rate (``PeerComparison.fell_from``): with two ranks, or where the peers' median names
  nobody, the rank behind a persistent job-wide drop is the one whose own rate fell below
  ``fraction`` x its level before the drop while its peers held theirs. In synchronous data
  parallel every rank's step slows and the others wait in all-reduce, so only the slow rank's own
  compute rate falls; a slower network (every rank's compute holds) or a job-wide slowdown (every
  rank's falls) names nobody.
"""

from __future__ import annotations

import array
import bisect
import re
import statistics
from collections import deque
from collections.abc import Sequence
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
PEER_CHECK_INTERVAL_S = 1.0
"""The live detector compares ranks with their peers at most this often (clock seconds)."""
MAX_SHAPES = 16
"""Line shapes tracked per attempt for the job rate; further shapes (a log that changes format
without end) are not tracked, which bounds the memory of one detector."""
MAX_SHAPE_CHARS = 200
"""Characters of a progress line read for its shape (``line_shape``)."""
_WORD = re.compile(r"[A-Za-z][\w./-]*")
_DIGIT_FREE = re.compile(r"[^0-9]*")
_DIGITS_AS_ZERO = str.maketrans("123456789", "000000000")
_SHAPES: dict[str, str] = {}
_MAX_CACHED_SHAPES = 4096
"""Line shapes remembered by ``line_shape`` (by line head with digits as 0); cleared when full."""


@dataclass(frozen=True, slots=True)
class Drop:
    """A sustained drop: since when, how deep, and the sample that began it."""

    since: float
    baseline: float
    current: float
    first: anomalies.Evidence | None
    key: str = ""


Levels = dict[str, dict[str, float]]
"""Each series' median rate over the window at one scan, by line shape (group) and series key."""


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
        self._samples = _Window()
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
            self._samples.add(at, rate)
            self._samples.expire(at - self.baseline_window)

    @property
    def low_since(self) -> float | None:
        """When the current run of low samples began; None while the rate is at its baseline."""
        return self._low_since

    def _current_baseline(self, at: float) -> float | None:
        """Median of the baseline window: kept sorted as samples come and go, so a sample costs a
        bisect, not a sort of the window (every rank's line of one shape feeds this tracker)."""
        self._samples.expire(at - self.baseline_window)
        if len(self._samples.samples) < MIN_BASELINE_SAMPLES:
            return None
        return self._samples.median()

    def drop(self, now: float) -> Drop | None:
        """The current sustained drop, if the low run has lasted ``window`` up to ``now``."""
        if len(self._low) < MIN_LOW_SAMPLES or self._baseline is None or self._low_since is None:
            return None
        since = self._low_since
        if now - since < self.window:
            return None
        current = statistics.median(rate for _, rate in self._low)
        return Drop(since=since, baseline=self._baseline, current=current, first=self._low_first)


class _Window:
    """One series' samples inside the window, also kept sorted so its median costs O(1) per read.

    Adding or expiring a sample is a bisect plus an array shift of at most ``MAX_WINDOW_SAMPLES``
    doubles (a memmove), so a tick over thousands of ranks never re-sorts whole windows. Samples
    live in flat arrays of doubles (8 bytes each, not a tuple of two float objects, ~120 bytes):
    an engine with 10,000 workloads holds millions of them once the windows fill.
    """

    __slots__ = ("ordered", "rates", "samples")

    def __init__(self) -> None:
        self.samples = array.array("d")
        """The samples' times, oldest first (their rates at the same index of ``rates``)."""
        self.rates = array.array("d")
        self.ordered = array.array("d")

    def add(self, at: float, rate: float) -> None:
        if len(self.samples) >= MAX_WINDOW_SAMPLES:
            self._drop_oldest()
        self.samples.append(at)
        self.rates.append(rate)
        bisect.insort(self.ordered, rate)

    def expire(self, horizon: float) -> None:
        while self.samples and self.samples[0] < horizon:
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        rate = self.rates[0]
        del self.samples[0]
        del self.rates[0]
        del self.ordered[bisect.bisect_left(self.ordered, rate)]

    def median(self) -> float:
        return _sorted_median(self.ordered)


def _sorted_median(values: Sequence[float], skip: int | None = None) -> float:
    """Median of sorted ``values``, leaving out position ``skip`` when given (O(1))."""
    count = len(values) - (1 if skip is not None else 0)

    def at(index: int) -> float:
        return values[index + 1] if skip is not None and index >= skip else values[index]

    middle = count // 2
    return at(middle) if count % 2 else (at(middle - 1) + at(middle)) / 2.0


def line_shape(text: str) -> str:
    """The words of a progress line without numbers or names with digits in them.

    Rank 0 often prints the job's aggregate line beside its own per-rank line; both carry a rate
    under the same rank, and one series mixing them hides a slow rank 0 (the median of 1200 and
    120 alternating is 660). Keyed by shape, ``[rank0]: step 10/200 | 1200 samples/s`` and
    ``[rank0]: local step 10 | 120 samples/s`` are two series, while the prefixes that name the
    rank or host (``[rank3]:``, ``gpu-a01:41000:41000``) drop out and every rank's line of one kind
    shares a shape.
    """
    head = text[:MAX_SHAPE_CHARS]
    if not head.isascii():
        return " ".join(word for word in _WORD.findall(head) if not any(c.isdigit() for c in word))
    # ASCII, the common case: only 0-9 are digits. Writing every digit as 0 changes neither where
    # words start and end nor which words hold a digit, so lines that differ only in their
    # numbers (every progress line of one kind) share one cache entry.
    key = head.translate(_DIGITS_AS_ZERO)
    shape = _SHAPES.get(key)
    if shape is None:
        if len(_SHAPES) >= _MAX_CACHED_SHAPES:
            _SHAPES.clear()
        shape = _SHAPES[key] = " ".join(filter(_DIGIT_FREE.fullmatch, _WORD.findall(head)))
    return shape


class PeerComparison:
    """Per-rank (or per-node) rates compared with the peers' median over a sliding window.

    Series are compared only with series of the same ``group`` (the line's shape): ranks' own
    lines with ranks' own lines, never with rank 0's job-wide line. Each tick costs O(series x
    log series) for the peers' median, plus amortised O(1) per sample added or expired.
    """

    def __init__(self, fraction: float, window: float) -> None:
        if not 0.0 < fraction < 1.0:
            raise ValueError(f"throughput drop fraction must be in (0, 1), got {fraction}")
        self.fraction = fraction
        self.window = window
        self._series: dict[tuple[str, str], _Window] = {}
        self._low_since: dict[tuple[str, str], float] = {}
        self._first: dict[tuple[str, str], anomalies.Evidence] = {}
        self._last_evidence: dict[tuple[str, str], anomalies.Evidence] = {}
        self.levels: Levels = {}
        """The medians of the latest scan (``stragglers``/``slow_now``): a fresh dict per scan, so a
        caller may keep one as the ranks' levels before a drop at no cost (``fell_from``)."""

    def add(
        self, key: str, at: float, rate: float, evidence: anomalies.Evidence | None = None, *, group: str = ""
    ) -> None:
        ident = (group, key)
        series = self._series.get(ident)
        if series is None:
            series = self._series[ident] = _Window()
        series.add(at, rate)
        if evidence is not None:
            self._last_evidence[ident] = evidence
        series.expire(at - self.window)

    def series_count(self) -> int:
        """Series currently held (at most one per rank and line shape)."""
        return len(self._series)

    def stragglers(self, now: float) -> list[Drop]:
        """Series slow against their peers for at least ``window``, slowest first (one per key)."""
        return self._scan(now, persistent=True)

    def slow_now(self, now: float) -> list[Drop]:
        """Series below their peers at ``now``, however briefly (slowest first, one per key): names the
        rank behind a job-wide drop whose own persistence was already established."""
        return self._scan(now, persistent=False)

    def _scan(self, now: float, *, persistent: bool) -> list[Drop]:
        by_group: dict[str, dict[str, float]] = {}
        for ident, series in list(self._series.items()):
            series.expire(now - self.window)
            if not series.samples:
                self._forget(ident)
            elif len(series.samples) >= MIN_LOW_SAMPLES:
                by_group.setdefault(ident[0], {})[ident[1]] = series.median()
        self.levels = by_group
        found: dict[str, Drop] = {}
        for group, medians in by_group.items():
            if len(medians) < MIN_PEERS:
                continue
            ordered = sorted(medians.values())
            for key, value in medians.items():
                ident = (group, key)
                peers = _sorted_median(ordered, skip=bisect.bisect_left(ordered, value))
                if peers > 0 and value < self.fraction * peers:
                    since = self._low_since.setdefault(ident, now)
                    if ident not in self._first and ident in self._last_evidence:
                        self._first[ident] = self._last_evidence[ident]
                    if not persistent or now - since >= self.window:
                        drop = Drop(since, peers, value, self._first.get(ident), key)
                        if key not in found or drop.current / drop.baseline < found[key].current / found[key].baseline:
                            found[key] = drop
                else:
                    self._low_since.pop(ident, None)
                    self._first.pop(ident, None)
        return sorted(found.values(), key=lambda d: d.current / d.baseline)

    def fell_from(self, before: Levels, since: float) -> list[Drop]:
        """Series whose own rate fell below ``fraction`` x their level in ``before`` (levels kept
        from a scan before a job-wide drop began at ``since``), as of the latest scan, slowest first.

        A series is named only where at least as many series of its line shape held their rate as
        fell: the rank whose own compute time rose while its peers' did not. Two ranks are enough
        (unlike ``stragglers``, which needs ``MIN_PEERS`` for a median of the others); a series
        alone in its shape (rank 0's job-wide line) is never named, and neither is anyone when
        every rank's rate fell alike (the slowdown is the job's, not one rank's)."""
        found: dict[str, Drop] = {}
        for group, current in self.levels.items():
            then = before.get(group)
            if not then:
                continue
            compared = [(key, then[key], value) for key, value in current.items() if then.get(key, 0.0) > 0]
            fell = [(key, level, value) for key, level, value in compared if value < self.fraction * level]
            if not fell or len(fell) * 2 > len(compared):
                continue
            for key, level, value in fell:
                drop = Drop(since, level, value, self._last_evidence.get((group, key)), key)
                if key not in found or drop.current / drop.baseline < found[key].current / found[key].baseline:
                    found[key] = drop
        return sorted(found.values(), key=lambda d: d.current / d.baseline)

    def _forget(self, ident: tuple[str, str]) -> None:
        """A series with nothing in the window (the rank stopped reporting) holds no memory."""
        self._series.pop(ident, None)
        self._low_since.pop(ident, None)
        self._first.pop(ident, None)
        self._last_evidence.pop(ident, None)
