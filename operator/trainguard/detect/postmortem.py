"""Post-mortem reading of a finished log: hangs by silence, and stragglers named by per-rank figures.

Place in the loop: ``detect.static`` (``trainguard detect``) only. The live path measures silence
with a clock (``detect.hang``); a finished file has no clock, only the timestamps its own lines
carry. ``static.FileAnalyzer`` hands this module a few things while it reads, all bounded: the last
progress line, the last initialisation line, the last ``TAIL_LINES`` lines, and the lines that
``TRIGGER`` finds (per-rank tables and figures, host-memory figures). ``Collector`` keeps what
they say; ``hang``, ``straggler`` and ``memory_growth`` read it at the end of the file.

Decisions a reader should know:

* Silence is measured between the last sign of life of the program (its last progress line, or
  its last initialisation line when it never made progress, or a later line of its own) and a
  later line from *outside* it: the scheduler (``slurmstepd``, ``srun``), the launcher (torch
  elastic's agent), a monitor (watchdog, heartbeat, wandb, the kernel). A silence ends the run
  only when it is at least ``MIN_SILENCE_S`` and ``CADENCE_FACTOR`` times the run's usual gap
  between progress lines. Lines of the program itself (an evaluation, a checkpoint save) are signs
  of life the silence is measured from, and a clean ending (finished, completed, exiting) keeps the
  file healthy: a log that stops because the excerpt stops, or because the run stopped, is not a hang.
* Only timestamps of one kind are compared (ISO dates; syslog month-day; glog/c10d month-day;
  a bare time of day only forwards), so two clocks are never mixed up.
* A file without any timestamp cannot show a silence: ``no_clock_note`` says so in the summary
  instead of guessing.
* Only the tail of the file is kept: when more than ``TAIL_LINES`` lines follow the last sign of
  life and the tail holds only outside lines, the lines before the tail are assumed to be outside
  lines too (a monitor ticking for hours prints nothing else).
"""

from __future__ import annotations

import calendar
import itertools
import re
import statistics
import time
from collections import deque
from dataclasses import dataclass, field

from trainguard.model import anomalies, vocab

TAIL_LINES = 256
"""Last lines of the file kept for the silence analysis (room for a kill's teardown after the silence)."""
MIN_SILENCE_S = 1800.0
"""Shortest silence called a hang: the live detector's default hang timeout (``DetectionSettings``)."""
CADENCE_FACTOR = 20.0
"""A silence must also be this many times the run's median gap between progress lines."""
TABLE_GAP = 3.0
"""Per-rank figures: the slow group's smallest value is at least this many times the largest of the rest ..."""
TABLE_SHARE = 0.1
"""... and exceeds the median by at least this share of the largest time in the table (noise in
tiny columns, e.g. milliseconds of data time beside seconds of step time, is not a straggler)."""
MIN_RANKS = 3
"""Ranks a comparison needs."""
MINMAX_RATIO = 2.0
"""A min/max-per-rank pair: the extreme rank is out of line when max >= this x min."""

PATTERN_LAST_PROGRESS = "postmortem.last_progress"
PATTERN_AFTER_SILENCE = "postmortem.after_silence"
PATTERN_RANK_FIGURES = "postmortem.per_rank_figures"
PATTERN_MEMORY = "postmortem.host_memory_growth"

TRIGGER_EXPRESSIONS = (
    rb"^[ \t|]*rank[ \t|]+[a-z_ |]*(?:time|ms)",  # a table header: "rank  data_time  step_time"
    rb"\b(?:min|mn|max|mx)[a-z]*/r(?:a)?n?k:",  # Megatron / Composer "MnRtt/Rnk:", "MaxThroughput/Rank:"
    rb"\b(?:available|used|free|rss)[:=] ?[0-9][0-9.]* ?(?:[kmgt]i?b|[kmgt])\b",  # host memory figures
    rb"\bincreased rss\b",
    rb"Init COMPLETE|Training Started|Start(?:ing)? training|Running training|training starts",
    rb"Validation sanity check|\bEpoch 0\b|initialization complete|Init done",
    # a rank's own figure: "[rank5] step time: 4.81 s"
    rb"\brank[ \t:=#]*[0-9]{1,6}\b[^\n]{0,200}\b(?:time|latency|wait)[ \t]*(?:\((?:ms|s)\))?[ \t]*[:=]",
)
"""Case-insensitive, ``^`` at line starts; ``postmortem_reading`` runs them as one Hyperscan database."""
TRIGGER = re.compile(rb"(?i)(?:" + b"|".join(TRIGGER_EXPRESSIONS) + rb")", re.MULTILINE)
"""Lines worth offering to ``Collector.feed`` (bytes, searched over whole blocks by the reader)."""

_HEADER = re.compile(r"(?i)^[ \t|]*rank[ \t|]+([a-z_][^:=]*)$")
"""A table header: "rank" then column names (not "Rank 3 | ...: 4.2", a rank's own line)."""
_ROW = re.compile(r"^[ \t|]*(\d{1,6})((?:[ \t|]+-?\d+(?:\.\d+)?)+)[ \t|]*$")
_MINMAX = re.compile(r"(?i)\b(min|mn|max|mx)([a-z]+)/r(?:a)?n?k:\s*(\d+(?:\.\d+)?)\s*([a-z%]*)/(\d+)")
_MEMORY = re.compile(r"(?i)\b(used|rss)[:=] ?(\d+(?:\.\d+)?) ?([kmgt])i?b?\b")
_RANK_FIGURE = re.compile(
    r"(?i)\brank[ \t:=#]*([0-9]{1,6})\b[^\n]{0,200}?\b((?:[a-z][a-z_-]*[ _-])?(?:time|latency|wait))"
    r"[ \t]*(?:\((?:ms|s)\))?[ \t]*[:=][ \t]*(\d+(?:\.\d+)?)"
)
"""One rank's own figure on a line: "[rank5] step time: 4.81 s", "Rank 2 | data wait = 120"."""
_MAX_FIGURES = 4096
"""Ranks x metrics remembered from per-rank lines (each keeps its last ``_FIGURES_PER_RANK`` values)."""
_FIGURES_PER_RANK = 32
_TIME_WORDS = re.compile(r"(?i)time|rtt|lat|ms$|_s$|sec")
_RATE_WORDS = re.compile(r"(?i)throughput|tput|tflop|tf$|samples|tokens")
_WAIT_WORDS = re.compile(r"(?i)wait|idle|sync")

OUTSIDE = re.compile(
    r"(?i)slurmstepd|srun: |scancel|CANCELLED|DUE TO TIME LIMIT|torch\.distributed\.elastic|torchrun|"
    r"Sending process|SIGTERM|SIGKILL|SIGINT|death signal|Signal \d+|kubelet|Killing container|"
    r"wandb: |heartbeat|watchdog|monitor|health ?check|nvidia-smi|kernel: |NVRM|\bkill -0\b|^Terminated"
)
"""A line from the scheduler, the launcher or a monitor: it can close a silence of the program."""
INIT = re.compile(
    r"(?i)Init COMPLETE|Training Started|Start(?:ing)? training|Running training|training starts|"
    r"Validation sanity check|Epoch 0\b|initialization complete|Init done"
)
"""The program finished starting up: a silence after it with no progress is a hang after initialisation."""
CLEAN_END = re.compile(
    r"(?i)\bfinish(?:ed)?\b|\bcomplete[d]?\b|\bdone\b|\bexiting\b|exited normally|"
    r"max_epochs|max_steps|stopped|shutting down|goodbye|Synced|Run summary|Job finished"
)
"""A line that says the run ended on purpose: a silence after the last step is then not a hang. A
checkpoint save alone is not an ending, only a sign of life: a run that saves and then sits silent
until the time limit hung after the save."""

_ISO = re.compile(r"(\d{4})-(\d\d)-(\d\d)[T _](\d\d):(\d\d):(\d\d)")
_MONTHS = {
    m: i for i, m in enumerate(["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"], 1)
}
_SYSLOG = re.compile(r"(?i)^(?:<\d+>)?(" + "|".join(_MONTHS) + r") +(\d{1,2}) (\d\d):(\d\d):(\d\d)")
_GLOG = re.compile(r"(?:^|[\[\]: ])[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)")
_CLOCK = re.compile(r"^[+ ]*\[(\d\d):(\d\d):(\d\d)\]")


@dataclass(frozen=True, slots=True)
class Stamp:
    """A line's time: ``kind`` says which clock (only equal kinds compare), ``seconds`` on it."""

    kind: str
    seconds: float


def stamp(text: str) -> Stamp | None:
    """The time a line carries near its start (a Slurm cancel line: anywhere), or None.

    ISO dates become month-day times too when compared with a syslog or glog line, so the kinds
    are ``iso`` (absolute), ``md`` (month, day and time of an unknown year) and ``clock``.
    """
    head = text[:80] if "CANCELLED AT" not in text else text
    if m := _ISO.search(head):
        y, mo, d, h, mi, s = (int(g) for g in m.groups())
        if 1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and mi < 60 and s < 61 and y >= 1970:
            return Stamp("iso", float(calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0))))
    if m := _SYSLOG.search(text[:40]):
        return _md(_MONTHS[m.group(1).lower()], *(int(g) for g in m.groups()[1:]))
    if m := _GLOG.search(text[:48]):
        return _md(*(int(g) for g in m.groups()))
    if m := _CLOCK.search(text[:16]):
        h, mi, s = (int(g) for g in m.groups())
        return Stamp("clock", float(h * 3600 + mi * 60 + s)) if h < 24 and mi < 60 and s < 61 else None
    return None


def _md(month: int, day: int, hour: int, minute: int, second: int) -> Stamp | None:
    if not (1 <= month <= 12 and 1 <= day <= 31 and hour < 24 and minute < 60 and second < 61):
        return None
    return Stamp("md", float(((month * 31 + day) * 24 + hour) * 3600 + minute * 60 + second))


def _comparable(a: Stamp, b: Stamp) -> tuple[float, float] | None:
    """Both times on one clock (an ISO date read as month-day beside a month-day line), or None."""
    if a.kind == b.kind:
        return a.seconds, b.seconds
    iso, other = (a, b) if a.kind == "iso" else (b, a) if b.kind == "iso" else (None, None)
    if iso is None or other is None or other.kind != "md":
        return None
    t = time.gmtime(iso.seconds)
    converted = _md(t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec)
    if converted is None:
        return None
    return (converted.seconds, other.seconds) if a is iso else (other.seconds, converted.seconds)


@dataclass
class _Table:
    header_line: int
    header: str
    columns: list[str]
    rows: list[tuple[int, str, int, list[float]]] = field(default_factory=list)


@dataclass
class Collector:
    """What the reader hands over while it reads one file (bounded whatever the file's size)."""

    tail: deque[tuple[int, str]] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    recent_progress: deque[tuple[int, bytes | str]] = field(default_factory=lambda: deque(maxlen=64))
    """The last progress lines, as the reader had them (raw ASCII bytes on its fast path): decoded only at the end."""
    last_init: tuple[int, str] | None = None
    stragglers: list[anomalies.Anomaly] = field(default_factory=list)
    memory: list[tuple[int, str, float]] = field(default_factory=list)
    figures: dict[tuple[str, int], tuple[deque[float], tuple[int, str]]] = field(default_factory=dict)
    """(metric, rank) -> its last values and its last line, from per-rank lines."""
    _table: _Table | None = None

    @property
    def open(self) -> bool:
        """A per-rank table is being read: the next lines belong to it until one is not a row."""
        return self._table is not None

    @property
    def last_progress(self) -> tuple[int, str] | None:
        if not self.recent_progress:
            return None
        lineno, line = self.recent_progress[-1]
        return lineno, line.decode("ascii", "replace") if isinstance(line, bytes) else line

    def line(self, lineno: int, text: str) -> None:
        """A line of the tail (the reader offers at least the last ``TAIL_LINES`` of the file, in order)."""
        self.tail.append((lineno, text))

    def feed(self, lineno: int, text: str) -> None:
        """A line ``TRIGGER`` found, or any line while a table is open."""
        if self._table is not None:
            row = _ROW.match(text)
            values = [float(v) for v in re.split(r"[ \t|]+", row.group(2).strip())] if row else []
            if row and len(values) == len(self._table.columns):
                self._table.rows.append((lineno, text, int(row.group(1)), values))
                return
            self._close_table()
        if (header := _HEADER.match(text)) is not None:
            columns = [c for c in re.split(r"[ \t|]+", header.group(1).strip()) if c]
            if any(_TIME_WORDS.search(c) or _WAIT_WORDS.search(c) for c in columns):
                self._table = _Table(lineno, text, columns)
                return
        if INIT.search(text):
            self.last_init = (lineno, text)
        if _MINMAX.search(text):
            self._minmax(lineno, text)
        if (figure := _RANK_FIGURE.search(text)) is not None:
            key = (figure.group(2).lower().replace("-", "_").replace(" ", "_"), int(figure.group(1)))
            if key in self.figures or len(self.figures) < _MAX_FIGURES:
                series, _ = self.figures.get(key, (deque(maxlen=_FIGURES_PER_RANK), (lineno, text)))
                series.append(float(figure.group(3)))
                self.figures[key] = (series, (lineno, text))
        for m in _MEMORY.finditer(text):
            scale = {"k": 1e-6, "m": 1e-3, "g": 1.0, "t": 1e3}[m.group(3).lower()]
            if len(self.memory) < 10_000:
                self.memory.append((lineno, text, float(m.group(2)) * scale))

    def finish(self) -> None:
        """The file ended: a table still open is complete; per-rank lines are compared."""
        self._close_table()
        if self.stragglers:
            return
        metrics: dict[str, list[tuple[int, float]]] = {}
        for (metric, rank), (values, _) in self.figures.items():
            metrics.setdefault(metric, []).append((rank, statistics.median(values)))
        for metric, ranked in metrics.items():
            largest = max((abs(v) for _, v in ranked), default=0.0)
            apart = _apart(ranked, largest, low=bool(_WAIT_WORDS.search(metric)))
            if not apart:
                continue
            ranks = sorted(rank for rank, _ in apart)
            others = [v for rank, v in ranked if rank not in ranks]
            peer = next(rank for rank, _ in sorted(ranked) if rank not in ranks)
            lines = [self.figures[(metric, rank)][1] for rank in ranks[:19]] + [self.figures[(metric, peer)][1]]
            summary = (
                f"per-rank figures: rank(s) {', '.join(map(str, ranks))} at {_span(apart)} in {metric} where the "
                f"other {len(others)} ranks' median is {statistics.median(others):g}"
                + (" (the others wait for them)" if _WAIT_WORDS.search(metric) else "")
            )
            self.stragglers.append(_straggler(sorted(lines), ranks, summary))
            return

    def _close_table(self) -> None:
        table, self._table = self._table, None
        if table is None or len(table.rows) < MIN_RANKS or self.stragglers:
            return
        largest = max((abs(v) for _, _, _, values in table.rows for v in values), default=0.0)
        for index, name in enumerate(table.columns):
            if not _TIME_WORDS.search(name) and not _WAIT_WORDS.search(name):
                continue
            column = [(rank, values[index]) for _, _, rank, values in table.rows]
            slow = _apart(column, largest, low=bool(_WAIT_WORDS.search(name)))
            if slow:
                ranks = sorted(rank for rank, _ in slow)
                rows = [(lineno, text) for lineno, text, rank, _ in table.rows if rank in ranks]
                others = [values[index] for _, _, rank, values in table.rows if rank not in ranks]
                summary = (
                    f"per-rank table at line {table.header_line}: rank(s) {', '.join(map(str, ranks))} at "
                    f"{_span(slow)} in {name} where the other ranks' median is {statistics.median(others):g}"
                )
                self.stragglers.append(_straggler([(table.header_line, table.header), *rows], ranks, summary))
                return

    def _minmax(self, lineno: int, text: str) -> None:
        if self.stragglers:
            return
        found: dict[str, dict[str, tuple[float, int]]] = {}
        for m in _MINMAX.finditer(text):
            side = "min" if m.group(1).lower() in ("min", "mn") else "max"
            found.setdefault(m.group(2).lower(), {})[side] = (float(m.group(3)), int(m.group(5)))
        for metric, sides in found.items():
            if "min" not in sides or "max" not in sides or sides["min"][0] <= 0:
                continue
            (low, low_rank), (high, high_rank) = sides["min"], sides["max"]
            if high < MINMAX_RATIO * low:
                continue
            if _RATE_WORDS.search(metric):
                rank, what = low_rank, f"lowest {metric} {low:g} against a highest of {high:g}"
            elif _TIME_WORDS.search(metric):
                rank, what = high_rank, f"highest {metric} {high:g} against a lowest of {low:g}"
            else:
                continue
            summary = f"per-rank min/max at line {lineno}: rank {rank} has the {what}"
            self.stragglers.append(_straggler([(lineno, text)], [rank], summary))
            return


def _apart(values: list[tuple[int, float]], largest: float, *, low: bool) -> list[tuple[int, float]]:
    """The minority of ranks whose figure stands apart from the rest by a wide gap, or [].

    ``low``: for waits, where the rank the others wait for is the one that waits least; otherwise
    the slow ranks are the ones with the highest time. The gap between the two groups is at least
    ``TABLE_GAP`` (a ratio) and ``TABLE_SHARE`` of the largest figure (an absolute size).
    """
    ordered = sorted(values, key=lambda item: item[1])
    if len(ordered) < MIN_RANKS or largest <= 0:
        return []
    median = statistics.median(v for _, v in ordered)
    splits = range(1, len(ordered) // 2 + 1) if low else range((len(ordered) + 1) // 2, len(ordered))
    best: list[tuple[int, float]] = []
    best_gap = 0.0
    for split in splits:
        below, above = ordered[split - 1][1], ordered[split][1]
        gap = above / below if below > 0 else (float("inf") if above > 0 else 0.0)
        if gap > best_gap:
            best_gap, best = gap, (ordered[:split] if low else ordered[split:])
    if best_gap < TABLE_GAP or not best:
        return []
    size = median - max(v for _, v in best) if low else best[0][1] - median
    return best if size >= TABLE_SHARE * largest else []


def _span(group: list[tuple[int, float]]) -> str:
    low, high = min(v for _, v in group), max(v for _, v in group)
    return f"{low:g}" if low == high else f"{low:g}-{high:g}"


def _straggler(lines: list[tuple[int, str]], ranks: list[int], summary: str) -> anomalies.Anomaly:
    evidence = [_evidence(lineno, text, PATTERN_RANK_FIGURES) for lineno, text in lines[:20]]
    return anomalies.Anomaly(
        symptom=vocab.Symptom.STRAGGLER,
        category=vocab.Category.THROUGHPUT_DROP,
        attribution_hint=vocab.Attribution.UNKNOWN,
        evidence=evidence,
        suspect_ranks=ranks,
        first_seen_at=0.0,
        detected_at=0.0,
        summary=summary,
    )


def _evidence(lineno: int, text: str, pattern: str) -> anomalies.Evidence:
    return anomalies.Evidence(
        line=lineno,
        text=text[:500],
        pattern=pattern,
        source="",
        category=vocab.Category.NONE,
        severity=vocab.Severity.INFO,
    )


@dataclass(frozen=True, slots=True)
class Silence:
    """A silence that ended the run: from the program's last sign of life to an outside line."""

    seconds: float
    evidence: list[anomalies.Evidence]
    summary: str


def silence(collector: Collector, *, closing: tuple[int, str] | None = None) -> Silence | None:
    """The silence before the run ended, if the file shows one; ``closing``: a line known to end it
    (a time-limit or cancel line the catalog found), otherwise an outside line of the tail."""
    marks = [mark for mark in (collector.last_progress, collector.last_init) if mark is not None]
    if not marks:
        return None
    anchor = max(marks, key=lambda mark: mark[0])
    after = [(n, t) for n, t in collector.tail if n > anchor[0]]
    if closing is not None and closing[0] <= anchor[0]:
        return None
    is_progress = anchor == collector.last_progress
    threshold = _threshold(collector)
    # Walk the lines after the anchor in order: the program's own timestamped lines move its last
    # sign of life forward; the first outside line (or the given closing line) at least ``threshold``
    # after it is the end of the silence. Lines after that (the teardown of the kill) do not count.
    life, life_at = anchor, stamp(anchor[1])
    best: tuple[float, tuple[int, str]] | None = None
    for lineno, text in after if closing is None else [*[(n, t) for n, t in after if n < closing[0]], closing]:
        at = stamp(text)
        outside = OUTSIDE.search(text) is not None
        if closing is not None and (lineno, text) != closing and outside:
            continue  # a monitor line before the known end: neither a sign of life nor the end
        outside = outside or (lineno, text) == closing
        if not outside:
            if CLEAN_END.search(text):
                return None  # the run ended on purpose before anything closed a silence
            if at is not None:
                life, life_at = (lineno, text), at
            continue
        if at is None or life_at is None or (closing is None and at.kind != life_at.kind):
            continue  # an outside line on another clock (a pasted dmesg beside the training log) closes nothing
        pair = _comparable(life_at, at)
        if pair is not None and pair[1] - pair[0] >= threshold:
            best = (pair[1] - pair[0], (lineno, text))
            break
    if best is None:
        return None
    seconds, end = best
    what = (
        "its last line of its own"
        if life is not anchor
        else ("its last progress line" if is_progress else "its initialisation")
    )
    summary = (
        f"no sign of life for {_duration(seconds)}: {what} at line {life[0]}, then only scheduler, launcher or "
        f"monitor lines until line {end[0]}"
    )
    evidence = [_evidence(life[0], life[1], PATTERN_LAST_PROGRESS), _evidence(end[0], end[1], PATTERN_AFTER_SILENCE)]
    return Silence(seconds, evidence, summary)


def _threshold(collector: Collector) -> float:
    """``MIN_SILENCE_S``, or ``CADENCE_FACTOR`` x the median gap between timestamped progress lines."""
    stamps = [stamp(t.decode("ascii", "replace") if isinstance(t, bytes) else t) for _, t in collector.recent_progress]
    times = [t.seconds for t in stamps if t is not None]
    gaps = [b - a for a, b in itertools.pairwise(times) if b >= a]
    cadence = statistics.median(gaps) if gaps else 0.0
    return max(MIN_SILENCE_S, CADENCE_FACTOR * cadence)


def hang_anomaly(found: Silence) -> anomalies.Anomaly:
    """A post-mortem hang: ``progress_stalled``, the last sign of life and the line after the silence."""
    return anomalies.Anomaly(
        symptom=vocab.Symptom.HANG,
        category=vocab.Category.PROGRESS_STALLED,
        attribution_hint=vocab.Attribution.UNKNOWN,
        evidence=found.evidence,
        first_seen_at=0.0,
        detected_at=0.0,
        summary=found.summary,
    )


def no_clock_note(collector: Collector) -> str:
    """For a healthy verdict: say so when the file has no timestamp to measure a silence with."""
    if collector.last_progress is None and collector.last_init is None:
        return ""
    lines = [collector.last_progress, collector.last_init, *collector.tail]
    if any(item is not None and stamp(item[1]) is not None for item in lines):
        return ""
    return "no timestamps: the log alone cannot tell a run that hung from an excerpt that ends here"


def memory_growth(collector: Collector) -> list[anomalies.Evidence]:
    """The process's own host-memory figures rising (first and last line), or [] when they do not."""
    samples = collector.memory
    if len(samples) < 2 or samples[-1][2] <= samples[0][2]:
        return []
    first, last = samples[0], samples[-1]
    return [_evidence(first[0], first[1], PATTERN_MEMORY), _evidence(last[0], last[1], PATTERN_MEMORY)]


def _duration(seconds: float) -> str:
    hours, rest = divmod(int(seconds), 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"
