"""The per-workload detector: one attempt's live lines in, anomalies out.

Place in the loop: the engine creates one ``WorkloadDetector`` per (workload, attempt), feeds it
the clean lines from ``signals`` (``LogLine``), ticks it on a timer, and tells it when the attempt
ended. It combines ``detect.hosts`` (who printed a line), the catalog ``Matcher``,
``detect.crash`` (settle window + ``detect.first_cause``), ``detect.hang`` and
``detect.straggler``. Anomalies go on to attribution. Time comes only from the injected clock.

Survived errors: an error-severity hit followed, within the settle window, by a progress line
is withdrawn (a caught exception in a retry loop, a transient NCCL warning promoted to error).
A fatal hit is never withdrawn. The evidence is kept, so a later crash still shows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from trainguard.detect import catalog as catalogs
from trainguard.detect import crash, hang, hosts, progress, straggler
from trainguard.model import anomalies, clock, patterns, signals, vocab, workloads

PROGRESS_PATTERN = "progress"
"""Evidence pattern name for a progress line (not a catalog id)."""
STRAGGLER_PATTERN = "straggler.throughput_drop"
"""Evidence pattern name for a throughput-drop finding (not a catalog id)."""
IDLE_TICK_S = 1.0
"""How often a detector that took no line and has no crash window open needs its time-driven
checks (``tick_due``): hang and throughput windows are minutes long, so once a second loses
nothing, while ticking 10,000 idle detectors every tailing round cost more than reading their files."""
MAX_REPEATED_TEXTS = 1024
"""Distinct repeated serious lines remembered per attempt, so their copies skip parsing and matching
(a flood is one text; past this many, copies take the full path, still bounded by ``crash``)."""


class Matcher(Protocol):
    """What the detectors need of ``detect.matcher.Matcher``."""

    catalog: catalogs.Catalog

    def match(self, line: str) -> list[str]: ...

    def extract(self, pattern_id: str, line: str) -> dict[str, str]: ...


@dataclass(frozen=True)
class DetectionSettings:
    """Detector thresholds (a RecoveryPolicy's detection section maps onto these)."""

    hang_timeout_s: float = 1800.0
    """No progress line for this long (s) -> hang. 30 min: above the longest routine pauses
    (checkpoint save of a large model, evaluation) and the old NCCL default collective timeout."""
    progress_regex: str | None = None
    """Operator regex for progress lines (named groups step/rate/seconds); None = built-in patterns."""
    throughput_drop_fraction: float = 0.5
    """Straggler when throughput < this x the recent baseline (or peers). 0.5: fail-slows that
    matter halve throughput; smaller dips are within the noise of data loading and eval."""
    throughput_window_s: float = 300.0
    """... sustained for this long (s). 5 min: Minder's 4-min persistence gate, rounded up."""
    baseline_window_s: float = 1800.0
    """The baseline is the median rate over this long (s) before the drop."""
    settle_s: float = 1.0
    """Seconds to wait after the first error to collect the cascade before naming the first cause."""


def evidence_from_hit(
    spec: patterns.PatternSpec,
    line: signals.LogLine,
    prefix: hosts.Prefix,
    fields: dict[str, str],
    *,
    at: float | None,
) -> anomalies.Evidence:
    """One catalog hit as evidence; extracted fields win over what the prefix says.

    ``at`` is when the line was written or received (None when unknown, e.g. an old file).
    """
    node = fields.get("host") or line.node or prefix.node
    rank = _int(fields.get("rank"))
    if rank is None:
        rank = line.rank if line.rank is not None else prefix.rank
    return anomalies.Evidence(
        line=line.lineno,
        text=line.text,
        pattern=spec.id,
        source=line.source,
        at=at,
        node=node,
        rank=rank,
        gpu=_int(fields.get("gpu")),
        xid=_int(fields.get("xid")),
        category=spec.category,
        severity=spec.severity,
    )


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


class WorkloadDetector:
    """Detection for one attempt of one workload."""

    def __init__(
        self,
        matcher: Matcher,
        settings: DetectionSettings,
        clock: clock.Clock,
        *,
        workload: str,
        attempt: int,
        rank_map: hosts.RankMap | None = None,
    ) -> None:
        self.workload = workload
        self.attempt = attempt
        self._matcher = matcher
        self._settings = settings
        self._clock = clock
        self._specs = matcher.catalog.by_id
        self.rank_map = rank_map or hosts.RankMap()
        self._progress = progress.ProgressParser(settings.progress_regex)
        hints = {spec.id: spec.attribution_hint for spec in matcher.catalog.patterns}
        self._crash = crash.CrashDetector(settings.settle_s, hints)
        self._hang = hang.HangDetector(settings.hang_timeout_s)
        self._throughput: dict[str, straggler.ThroughputTracker] = {}
        self._peers = straggler.PeerComparison(settings.throughput_drop_fraction, settings.throughput_window_s)
        self._root = hosts.RootCauseReader()
        self._ranks_seen: set[int] = set()
        self._straggler_reported: set[str] = set()
        self._peers_checked: float | None = None
        self._levels_before: dict[str, straggler.Levels] = {}
        """Per line shape: the ranks' levels at the last peer check while that shape's job rate held
        (kept through its drop, so the rank whose own rate fell can be named; ``fell_from``)."""
        self._low_seen: dict[str, float] = {}
        """Per line shape: the last peer check that found its job rate low. The levels are taken
        again only a window after it, so a single sample back at speed in the middle of a drop does
        not replace the levels before the drop with the slow rank's slow one."""
        self._repeated: set[tuple[str, str | None, int | None]] = set()
        """Lines (text, node, rank) with serious hits that were all repeats (``MAX_REPEATED_TEXTS``)."""
        self._ended = False
        self._ticked_at: float | None = None
        self.last_progress: anomalies.Evidence | None = None
        """The latest progress line seen (the engine's signal journal samples it)."""

    def feed(self, line: signals.LogLine, *, tick: bool = True) -> list[anomalies.Anomaly]:
        """Take one clean line; returns anomalies that are due (usually none until the window settles).

        ``tick=False``: only take the line; the caller runs ``tick()`` once after a batch of lines
        (the engine's tailing round), as the time-driven checks need not run after every line."""
        if self._ended:
            return []
        if self._repeated and (line.text, line.node, line.rank) in self._repeated and not self._root.active:
            # The same text from the same place as a line all of whose hits were repeats: it would
            # add nothing but a count (a node flooding one Xid line), so it costs a lookup only.
            self._crash.repeats += 1
            return self.tick() if tick else []
        prefix = hosts.parse_prefix(line.text)
        self.rank_map.observe(prefix)
        rank = line.rank if line.rank is not None else prefix.rank
        if rank is not None:
            self._ranks_seen.add(rank)
        if (root := self._root.feed(line.lineno, line.text)) is not None:
            self._crash.root_cause = root
            if root.host and root.rank is not None:
                self.rank_map.learn(root.host, root.rank)
        serious = False
        kept = False
        for pattern_id in self._matcher.match(line.text):
            spec = self._specs.get(pattern_id)
            if spec is None:
                continue
            fields = self._matcher.extract(pattern_id, line.text)
            item = evidence_from_hit(spec, line, prefix, fields, at=line.received_at)
            kept = self._crash.add(item, self._clock.now()) or kept
            serious = serious or spec.severity in (vocab.Severity.FATAL, vocab.Severity.ERROR)
        if serious and not kept and len(self._repeated) < MAX_REPEATED_TEXTS:
            self._repeated.add((line.text, line.node, line.rank))
        if not serious:
            self._record_progress(line, prefix)
        return self.tick() if tick else []

    def _record_progress(self, line: signals.LogLine, prefix: hosts.Prefix) -> None:
        found = self._progress.parse(line.text)
        if found is None:
            return
        item = anomalies.Evidence(
            line=line.lineno,
            text=line.text,
            pattern=PROGRESS_PATTERN,
            source=line.source,
            at=line.received_at,
            node=line.node or prefix.node,
            rank=line.rank if line.rank is not None else prefix.rank,
            category=vocab.Category.NONE,
            severity=vocab.Severity.INFO,
        )
        self._hang.progress(line.received_at, item)
        self.last_progress = item
        if self._crash.window_opened is not None and not self._has_fatal():
            self._crash.withdraw()
            self._repeated.clear()  # the withdrawn hits are warnings now: the same line may open a window
        if found.rate is None:
            return
        shape = straggler.line_shape(line.text)
        if (tracker := self._tracker(shape)) is not None:
            tracker.add(line.received_at, found.rate, item)
        key = _series_key(item)
        if key is not None:
            self._peers.add(key, line.received_at, found.rate, item, group=shape)

    def _tracker(self, shape: str) -> straggler.ThroughputTracker | None:
        """The job-rate tracker of one line shape: rank 0's job-wide line is tracked apart from the
        ranks' own lines (a mixture of both has a median that hides either's drop)."""
        tracker = self._throughput.get(shape)
        if tracker is None and len(self._throughput) < straggler.MAX_SHAPES:
            s = self._settings
            tracker = straggler.ThroughputTracker(
                s.throughput_drop_fraction, s.throughput_window_s, s.baseline_window_s
            )
            self._throughput[shape] = tracker
        return tracker

    @property
    def has_serious(self) -> bool:
        """A fatal or error hit of this attempt is on record (withdrawn ones count as warnings)."""
        return self._crash.has_serious

    @property
    def settling(self) -> bool:
        """A crash window is open: evidence is held in memory until it concludes (the engine does
        not store read positions past such lines, so a restart reads them again)."""
        return self._crash.window_opened is not None

    def _has_fatal(self) -> bool:
        return self._crash.has_fatal

    def tick_due(self, now: float) -> bool:
        """Whether ``tick`` has anything to do for a detector that took no line since its last tick:
        a crash window is open, or ``IDLE_TICK_S`` passed."""
        return (self._crash.window_opened is not None or self._ticked_at is None
                or now - self._ticked_at >= IDLE_TICK_S)

    def tick(self) -> list[anomalies.Anomaly]:
        """Time-driven checks: a settled crash window, progress silence, a sustained throughput drop."""
        if self._ended:
            return []
        now = self._clock.now()
        self._ticked_at = now
        found: list[anomalies.Anomaly] = []
        if (anomaly := self._conclude_crash(now, force=False)) is not None:
            found.append(anomaly)
        if not self._crash.emitted and (anomaly := self._hang.check(now)) is not None:
            found.append(anomaly)
        found.extend(self._stragglers(now))
        return found

    def conclude_due(self) -> list[anomalies.Anomaly]:
        """Only the crash window's conclusion, if it has settled: the engine checks open windows
        between its tailing rounds, so a crash is named ``settle`` after its first line, not a round
        later (``tick`` runs the other time-driven checks, once a round)."""
        if self._ended:
            return []
        anomaly = self._conclude_crash(self._clock.now(), force=False)
        return [anomaly] if anomaly is not None else []

    def on_exit(self, job: workloads.JobSnapshot) -> list[anomalies.Anomaly]:
        """The attempt ended: conclude any open window, and report a failed exit with no log evidence."""
        if self._ended:
            return []
        now = self._clock.now()
        found: list[anomalies.Anomaly] = []
        if crash.exit_category(job) is not None and not self._crash.has_serious:
            self._crash.add(crash.exit_evidence(job, now), now)
        if (anomaly := self._conclude_crash(now, force=self._crash.window_opened is not None)) is not None:
            found.append(anomaly)
        self._ended = True
        return found

    def _conclude_crash(self, now: float, *, force: bool) -> anomalies.Anomaly | None:
        return self._crash.conclude(now, node_of=self.rank_map.node_of, ranks_seen=self._ranks_seen, force=force)

    def _stragglers(self, now: float) -> list[anomalies.Anomaly]:
        found: list[anomalies.Anomaly] = []
        drops: list[straggler.Drop] = []
        if self._peers_checked is None or now - self._peers_checked >= straggler.PEER_CHECK_INTERVAL_S:
            # feed() ticks on every line: with thousands of ranks, comparing them on every line would
            # cost O(ranks) per line; persistence is minutes, so once a second loses nothing.
            self._peers_checked = now
            drops = self._peers.stragglers(now)
            window = self._settings.throughput_window_s
            for shape, tracker in self._throughput.items():
                if tracker.low_since is not None:
                    self._low_seen[shape] = now
                elif shape not in self._low_seen or now - self._low_seen[shape] >= window:
                    self._levels_before[shape] = self._peers.levels  # a reference: the scan made a fresh dict
        for drop in drops:
            if drop.key in self._straggler_reported:
                continue
            self._straggler_reported.add(drop.key)
            found.append(self._straggler_anomaly(drop, now))
        shape, job_drop = next(
            ((shape, d) for shape, t in self._throughput.items() if (d := t.drop(now)) is not None), ("", None)
        )
        if job_drop is not None and "" not in self._straggler_reported and not found:
            self._straggler_reported.add("")
            # The job-wide drop is already persistent: a rank below its peers now is the one behind it
            # (its own compute time rose while the others wait for it), so the anomaly names it at once.
            slow = self._peers.slow_now(now)
            named = slow if len(slow) * 4 <= self._peers.series_count() else []
            why = "below its peers"
            if not named:
                # Too few peers for a median (two ranks), or none below it: the rank whose own rate
                # fell since before the drop while its peers held theirs is the one behind it.
                named = self._peers.fell_from(self._levels_before.get(shape, {}), job_drop.since)
                why = "below its own rate before the drop, its peers' held"
            self._straggler_reported.update(d.key for d in named)
            found.append(straggler_anomaly(job_drop, now, self.rank_map, named, why=why))
        return found

    def _straggler_anomaly(self, drop: straggler.Drop, now: float) -> anomalies.Anomaly:
        return straggler_anomaly(drop, now, self.rank_map)


def _series_key(item: anomalies.Evidence) -> str | None:
    if item.rank is not None:
        return f"rank:{item.rank}"
    if item.node is not None:
        return f"node:{item.node}"
    return None


def straggler_anomaly(
    drop: straggler.Drop,
    now: float,
    rank_map: hosts.RankMap,
    slow: Sequence[straggler.Drop] = (),
    *,
    why: str = "below its peers",
) -> anomalies.Anomaly:
    """A throughput-drop anomaly; suspects only when a rank/node is slow against its peers: the
    drop's own series, or for a job-wide drop the series in ``slow`` (below their peers now, or
    below their own rate before the drop; ``why`` says which, in the summary).
    The evidence lines carry the rank and its node, so the anomaly names them without the verdict."""
    nodes: list[str] = []
    ranks: list[int] = []
    evidence: list[anomalies.Evidence] = []
    for item in (drop, *slow):
        rank: int | None = None
        node: str | None = None
        if item.key.startswith("rank:"):
            rank = int(item.key[5:])
            node = rank_map.node_of(rank)
        elif item.key.startswith("node:"):
            node = item.key[5:]
        if rank is not None and rank not in ranks:
            ranks.append(rank)
        if node is not None and node not in nodes:
            nodes.append(node)
        if item.first is not None:
            update: dict[str, object] = {
                "pattern": STRAGGLER_PATTERN,
                "category": vocab.Category.THROUGHPUT_DROP,
                "severity": vocab.Severity.WARNING,
            }
            if item.first.node is None and node is not None:
                update["node"] = node
            evidence.append(item.first.model_copy(update=update))
    who = f" on {drop.key}" if drop.key else ""
    if slow:
        who += f" ({why}: {', '.join(d.key for d in slow)})"
    return anomalies.Anomaly(
        symptom=vocab.Symptom.STRAGGLER,
        category=vocab.Category.THROUGHPUT_DROP,
        attribution_hint=vocab.Attribution.UNKNOWN,
        evidence=evidence,
        suspect_nodes=nodes,
        suspect_ranks=ranks,
        first_seen_at=drop.since,
        detected_at=now,
        summary=f"throughput{who} {drop.current:.4g} vs baseline {drop.baseline:.4g} "
        f"({drop.current / drop.baseline:.0%}) since {drop.since:.0f}",
    )
