"""Throughput drops in the progress samples of a finished file (``trainguard detect``).

Place: ``detect.static`` keeps progress samples while it reads (thinned past a bound) and asks
``find_drop`` at the end of the file (split from it to keep each module small). Line timestamps
are used when most samples carry one (``TIMESTAMPED_SHARE``); otherwise each series' sample index
stands in for time, with windows of ``INDEX_WINDOW`` samples against ``INDEX_BASELINE`` before them.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainguard.detect import straggler, stream
from trainguard.model import anomalies

INDEX_WINDOW = 5
"""Without timestamps: a drop must last this many samples ..."""
INDEX_BASELINE = 20
"""... against the median of up to this many samples before it."""
TIMESTAMPED_SHARE = 0.8
"""Share of progress lines with a timestamp needed to use time rather than sample index."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One progress line with a rate, as ``find_drop`` reads it."""

    key: str | None
    group: str
    at: float | None
    rate: float
    evidence: anomalies.Evidence


def find_drop(samples: list[Sample], settings: stream.DetectionSettings) -> straggler.Drop | None:
    """The first sustained throughput drop in a file's progress samples.

    One rank against its peers first (when ranks are known), then the job against its own baseline.
    """
    if not samples:
        return None
    timed = sum(1 for s in samples if s.at is not None) >= TIMESTAMPED_SHARE * len(samples)
    if timed:
        window, baseline = settings.throughput_window_s, settings.baseline_window_s
    else:
        window, baseline = float(INDEX_WINDOW - 1), float(INDEX_BASELINE)
    fraction = settings.throughput_drop_fraction
    by_key: dict[str | None, list[Sample]] = {}
    for sample in samples:
        by_key.setdefault(sample.key, []).append(sample)
    ranked_keys = [k for k in by_key if k is not None]
    if len(ranked_keys) >= straggler.MIN_PEERS:
        peers = straggler.PeerComparison(fraction, window)
        ordinal: dict[tuple[str, str], int] = {}
        last_check: float | None = None
        for sample in samples:
            if sample.key is None or (timed and sample.at is None):
                continue
            series = (sample.group, sample.key)
            ordinal[series] = ordinal.get(series, 0) + 1
            at = sample.at if timed and sample.at is not None else float(ordinal[series])
            peers.add(sample.key, at, sample.rate, sample.evidence, group=sample.group)
            if last_check is not None and at - last_check < window / 10:
                continue
            last_check = at
            found = peers.stragglers(at)
            if found:
                return found[0]
    by_series: dict[tuple[str | None, str], list[Sample]] = {}
    for sample in samples:
        by_series.setdefault((sample.key, sample.group), []).append(sample)
    main_series = max(by_series, key=lambda k: len(by_series[k]))
    tracker = straggler.ThroughputTracker(fraction, window, baseline)
    for index, sample in enumerate(by_series[main_series]):
        if timed and sample.at is None:
            continue
        at = sample.at if timed and sample.at is not None else float(index)
        tracker.add(at, sample.rate, sample.evidence)
        job_drop = tracker.drop(at)
        if job_drop is not None:
            return job_drop
    return None
