"""Whole-file analysis: one verdict for one finished log file (``trainguard detect``).

Place in the loop: the CLI's offline twin of ``detect.stream``. Same pieces (``detect.sanitize``,
``detect.hosts``, the catalog ``Matcher``, ``detect.first_cause``, ``detect.progress``,
``detect.straggler``) but no clock: a file either reports a crash or a hang itself, or its
progress lines show a sustained throughput drop, or it is healthy.

Files are read as bytes in a streaming loop with a bounded line length, so a 2 GB log or a
10 MB line never sits in memory whole; only evidence and progress samples are kept.

Decisions a reader should know:

* ``hang`` for a static file means the file reports one: the first cause is an NCCL/c10d
  watchdog timeout with no other cause.
* Survived errors: when at least ``RECOVERED_AFTER`` progress lines follow the last error, the
  run got past it (a caught exception in a retry loop, an elastic restart that resumed); the
  file is ``healthy``. The errors stay visible in the text output as context.
* Straggler: line timestamps are used when most progress lines carry one; otherwise each
  series' sample index stands in for time (``detect.drops``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, BinaryIO, TypeAlias

from trainguard.detect import (
    drops,
    first_cause,
    hosts,
    postmortem,
    postmortem_reading,
    progress,
    reading,
    refine,
    sanitize,
    straggler,
    stream,
)
from trainguard.detect import matcher as matchers
from trainguard.model import anomalies, signals, vocab

_Block = reading.Block
BLOCK_BYTES = reading.BLOCK_BYTES
MAX_LINE_BYTES = reading.MAX_LINE_BYTES
cut_line = reading.cut_line
read_blocks = reading.read_blocks
read_lines = reading.read_lines

RECOVERED_AFTER = 5
"""Progress lines after the last error that show the run survived it."""


@dataclass
class Result:
    """The verdict on one file, in the shape of the ``detect --format json`` contract."""

    path: str
    symptom: vocab.Symptom
    category: vocab.Category
    attribution: vocab.Attribution
    evidence: list[anomalies.Evidence] = field(default_factory=list)
    suspect_nodes: list[str] = field(default_factory=list)
    suspect_ranks: list[int] = field(default_factory=list)
    context: list[anomalies.Evidence] = field(default_factory=list)
    lines: int = 0
    summary: str = ""

    def to_json(self, max_evidence: int) -> dict[str, object]:
        return {
            "path": self.path,
            "symptom": self.symptom.value,
            "category": self.category.value,
            "attribution": self.attribution.value,
            "evidence": [{"line": e.line, "text": e.text, "pattern": e.pattern} for e in self.evidence[:max_evidence]],
            "suspect_nodes": self.suspect_nodes,
            "suspect_ranks": self.suspect_ranks,
        }


MAX_SAMPLES = 100_000
"""Progress samples kept per file. Past this the series is thinned (every other sample dropped,
then only every 2nd, 4th, ... new one kept), so a multi-GB log with millions of steps keeps its
shape in bounded memory; a drop must then last longer in lines to count, never shorter."""
MAX_HITS_PER_PATTERN = 1_000
"""Evidence lines kept per catalog pattern: the earliest ones, which is what first-cause ranking
and the lagging-rank analysis read; a log repeating one warning a million times stays bounded."""


_DIRTY = re.compile(rb"[^\t\x20-\x7e]")
"""A byte that ``sanitize.clean_line`` would decode, strip or replace; lines without one are text as is."""
_ROOT_START = "Root Cause (first observed failure)"
"""What starts torch elastic's Root Cause block (``hosts.RootCauseReader``): lines without it are
not offered to the reader while no block is open."""
_NO_IDS: list[str] = []


_Pending: TypeAlias = tuple[int, bytes | str, int | bytes | None, str | None, float]
"""A kept progress sample before it is built (``_sample``): line number, the line's first
``_SAMPLE_CHARS`` (raw ASCII bytes from the fast path, clean text otherwise), rank (or the srun
label that gives it), node, rate.
Most samples are dropped again by thinning; building only the survivors saves their parse."""
_SAMPLE_CHARS = 500
"""What a sample needs of its line: its evidence text (500), shape (``straggler.MAX_SHAPE_CHARS``)
and timestamp (the first 64 characters)."""


def _sample(path: str, pending: _Pending) -> drops.Sample:
    """The straggler sample of one progress line with a rate, as ``drops.find_drop`` reads it."""
    lineno, line, label, node, rate = pending
    text = line.decode("ascii") if isinstance(line, bytes) else line
    rank = int(label) if isinstance(label, bytes) else label
    item = anomalies.Evidence(
        line=lineno,
        text=text[:500],
        pattern=stream.PROGRESS_PATTERN,
        source=path,
        at=_line_time(text),
        node=node,
        rank=rank,
        category=vocab.Category.NONE,
        severity=vocab.Severity.INFO,
    )
    key = f"rank:{rank}" if rank is not None else (f"node:{node}" if node else None)
    return drops.Sample(key, straggler.line_shape(text), item.at, rate, item)


_TIMES: dict[str, float | None] = {}
_MAX_TIMES = 100_000
"""Timestamps to whole seconds remembered by ``_line_time``; cleared when full."""


def _line_time(text: str) -> float | None:
    """``progress.line_time``, remembering each whole second (the samples of a log share most seconds)."""
    m = progress._ISO.search(text, 0, 64)
    if m is None:
        return None
    key = m.group(0) if m.group(7) is None else text[m.start() : m.start(7) - 1]
    if key not in _TIMES:
        if len(_TIMES) >= _MAX_TIMES:
            _TIMES.clear()
        _TIMES[key] = progress.line_time(key)
    base = _TIMES[key]
    if base is None or m.group(7) is None:
        return base
    return base + float("0." + m.group(7))


def _unanchored(regex: re.Pattern[str]) -> bytes:
    """A ``hosts`` prefix regex as bytes without its ``^``, to be used inside a larger pattern."""
    return regex.pattern.removeprefix("^").encode()


# The fast path's prefix: an optional srun label, then an optional NCCL host:pid:tid [local rank]
# (the only two ``hosts.parse_prefix`` takes in this order, since no other prefix regex can match
# where either does), then no further prefix of any kind: otherwise the line is parsed in full.
# On a line of printable ASCII, ``\s`` is a space or a tab in both str and bytes patterns.
_FAST_PREFIX = re.compile(
    rb"(?>[ \t]{0,6}(\d{1,6}): )?"
    rb"(?>([A-Za-z0-9][A-Za-z0-9_.-]{0,62}):\d{1,9}:\d{1,9} \[\d{1,3}\] )?"
    rb"(?!"
    + b"|".join(
        _unanchored(rx)
        for rx in (hosts._SRUN_LABEL, hosts._TORCHRUN, hosts._NCCL, hosts._SYSLOG, hosts._PDSH_IPV4, hosts._PDSH)
    )
    + rb")"
)
_MEGATRON = re.compile(progress._MEGATRON.pattern.replace(r"\s", r"[ \t]").encode())
"""``progress._MEGATRON`` for a line of printable ASCII, where whitespace is a space or a tab."""
_MEGATRON_MS = re.compile(progress._MEGATRON_MS.pattern.replace(r"\s", r"[ \t]").encode())
_TROUBLE = (
    rb"[^\t\n\x20-\x7e]",  # a byte that cleaning would change (a carriage return included)
    re.escape(_ROOT_START).encode(),  # the Root Cause reader reads on from here
    rb"srun: error: ",  # parse_prefix: srun's task summary names node and rank
    rb"\*\*\* ",  # ... slurmstepd's "*** STEP ... ON node"
    rb"Rank ",  # ... c10d's [Rank N]
    rb" nranks ",  # ... an NCCL communicator line names the global rank
    rb"PCI:",  # ... a PCI bus id
)
"""What makes a line leave the fast path of ``_scan_block`` wherever it stands in the line."""


@functools.cache
def _trouble_database() -> Any:
    """``_TROUBLE`` compiled into one Hyperscan database (once per process: a few milliseconds)."""
    import hyperscan

    database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    ids = list(range(len(_TROUBLE)))
    database.compile(expressions=list(_TROUBLE), ids=ids, elements=len(ids), flags=[0] * len(ids))
    return database


@dataclass(slots=True)
class _State:
    """What ``FileAnalyzer`` keeps while reading one file."""

    path: str
    lineno: int = 0
    rank_map: hosts.RankMap = field(default_factory=hosts.RankMap)
    root_reader: hosts.RootCauseReader = field(default_factory=hosts.RootCauseReader)
    root: hosts.RootCause | None = None
    evidence: list[anomalies.Evidence] = field(default_factory=list)
    samples: list[_Pending] = field(default_factory=list)
    stride: int = 1
    skipped: int = 0
    hits: dict[str, int] = field(default_factory=dict)
    ranks_seen: set[int] = field(default_factory=set)
    progress_since_error: int = 0
    post: postmortem.Collector = field(default_factory=postmortem.Collector)


class FileAnalyzer:
    """Analyses one file with a compiled matcher. One instance per file."""

    def __init__(
        self, matcher: stream.Matcher, settings: stream.DetectionSettings, block_bytes: int = BLOCK_BYTES
    ) -> None:
        self._matcher = matcher
        self._block_bytes = block_bytes
        self._settings = settings
        self._specs = matcher.catalog.by_id
        self._hints = {spec.id: spec.attribution_hint for spec in matcher.catalog.patterns}
        self._progress = progress.ProgressParser(settings.progress_regex)

    def analyze(self, path: str, handle: BinaryIO, on_progress: Callable[[int], None] | None = None) -> Result:
        """The verdict on one file, read in blocks: the matcher scans each block in one call.

        Gives the same result as ``analyze_by_line`` (tests hold them equal): a line is offered
        to the per-line matcher only when the block scan found a match ending on it, or when it
        is not plain printable ASCII (cleaning could change what matches). With Hyperscan and the
        built-in progress patterns, most lines take the fast path of ``_scan_block`` instead of
        the full per-line parse. ``on_progress`` is called with the bytes read so far after each block.
        """
        state = _State(path)
        # Only the catalog matcher scans blocks; another matcher is asked line by line.
        candidates = self._matcher.candidate_lines if isinstance(self._matcher, matchers.Matcher) else None
        trouble = _trouble_database() if candidates is not None and self._settings.progress_regex is None else None
        read = 0
        for block in read_blocks(handle, self._block_bytes):
            first_line = state.lineno + 1
            starts = candidates(block.data) if candidates is not None and not block.overlong else None
            if starts is not None and trouble is not None:
                self._scan_block(state, block.data, starts, matchers.line_starts(trouble, block.data))
            else:
                offset = 0
                for raw in block.lines():
                    state.lineno += 1
                    line_start, offset = offset, offset + len(raw) + 1
                    self._line(state, block, raw, line_start, offset, starts=starts)
            postmortem_reading.block(state.post, block, first_line)
            read += block.consumed
            if on_progress is not None:
                on_progress(read)
        return self._finish(state)

    def _line(
        self, state: _State, block: _Block, raw: bytes, line_start: int, offset: int, *, starts: set[int] | None
    ) -> None:
        """One line of a block, fully parsed (``lineno`` already counted): the reference path of ``analyze``."""
        body = raw.rstrip(b"\r")
        if block.overlong or len(body) > sanitize.DEFAULT_MAX_CHARS or _DIRTY.search(body) is not None:
            whole = raw if block.overlong else cut_line(raw, newline=offset <= len(block.data))
            if text := sanitize.clean_line(whole):
                self._feed(state, text, None)
            return
        if not body:
            return
        # A stripped carriage return changes what ``$`` sees: such a line is matched alone.
        known = starts is not None and len(body) == len(raw) and line_start not in starts
        self._feed(state, body.decode("ascii"), _NO_IDS if known else None)

    def _scan_block(self, state: _State, data: bytes, starts: set[int], trouble: set[int]) -> None:
        """The lines of one block, most of them without the full per-line parse.

        A line takes the fast path when it is plain printable ASCII (no byte cleaning could
        change), no catalog match ended on it, it holds none of the literals that make
        ``hosts.parse_prefix`` or the Root Cause reader look further (``trouble``: found by one
        Hyperscan scan of the block), its prefixes are at most an srun label and an NCCL
        host:pid:tid (``_FAST_PREFIX``, which also proves no other prefix follows) and no Root
        Cause block is open. For such a line ``_feed`` would find no pattern, no error and this
        prefix, so only the progress parse is left: skipped when the line holds none of the
        literals a built-in progress regex needs, done with two byte regexes for a Megatron
        iteration line, done by ``ProgressParser`` otherwise. A Megatron sample is kept as its
        raw line and built only if it survives thinning (``_finish``). Every other line goes
        through ``_line``: the results are those of ``analyze_by_line`` (tests hold them equal).
        """
        lines = data.split(b"\n")
        if not lines[-1]:
            lines.pop()  # the newline that ends the block, not an empty line
        block = _Block(data, len(data))
        rank_map, root_reader = state.rank_map, state.root_reader
        fast_prefix, megatron, megatron_ms = _FAST_PREFIX.match, _MEGATRON.search, _MEGATRON_MS.search
        limit = sanitize.DEFAULT_MAX_CHARS
        labels: set[bytes] = set()  # srun labels of fast lines: their ranks, converted once
        base = state.lineno
        root_active = root_reader.active
        offset = 0
        lineno = base
        for raw in lines:
            lineno += 1
            line_start = offset
            offset += len(raw) + 1
            if not raw:
                continue
            if (
                line_start in trouble
                or line_start in starts
                or len(raw) > limit
                or root_active
                or (prefix := fast_prefix(raw)) is None
            ):
                state.lineno = lineno
                self._line(state, block, raw, line_start, offset, starts=starts)
                root_active = root_reader.active
                continue
            label, host = prefix.group(1, 2)
            node = None
            if label is not None:
                labels.add(label)
                if host is not None:
                    node = host.decode("ascii")
                    rank_map.learn(node, int(label))
            elif host is not None:
                node = host.decode("ascii")
            where = raw.find(b"iteration")
            if where >= 0 and megatron(raw, where) is not None:
                state.progress_since_error += 1
                state.post.recent_progress.append((lineno, raw))
                ms = megatron_ms(raw)
                if ms is None:
                    continue
                value = float(ms.group(1).replace(b",", b""))
                if value > 0:
                    state.skipped += 1
                    if state.skipped >= state.stride:
                        self._keep(state, (lineno, raw[:_SAMPLE_CHARS], label, node, 1000.0 / value))
            elif (
                b"iter" in (low := raw.lower())
                or b"step" in low
                or b"tok" in low
                or b"samples" in low
                or b"s/" in low
                or b"<" in raw
                or b"{'loss': " in raw
            ):
                text = raw.decode("ascii")
                parsed = self._progress.parse(text)
                if parsed is None:
                    continue
                state.progress_since_error += 1
                state.post.recent_progress.append((lineno, text))
                if parsed.rate is not None:
                    state.skipped += 1
                    if state.skipped >= state.stride:
                        self._keep(state, (lineno, text[:_SAMPLE_CHARS], label, node, parsed.rate))
        state.lineno = lineno
        state.ranks_seen.update(map(int, labels))

    def _keep(self, state: _State, sample: _Pending) -> None:
        """Keep one progress sample that passed the stride (``skipped`` counted it), thinning at ``MAX_SAMPLES``."""
        state.skipped = 0
        if len(state.samples) >= MAX_SAMPLES:
            state.samples = state.samples[::2]
            state.stride *= 2
        state.samples.append(sample)

    def analyze_by_line(self, path: str, handle: BinaryIO) -> Result:
        """The verdict on one file, one ``Matcher.match`` call per line: the reference ``analyze`` keeps to."""
        state = _State(path)
        for raw in read_lines(handle):
            state.lineno += 1
            text = sanitize.clean_line(raw)
            if text:
                self._feed(state, text, None)
            postmortem_reading.line(state.post, state.lineno, raw, text)
        return self._finish(state)

    def _feed(self, state: _State, text: str, ids: list[str] | None) -> None:
        """Take one non-empty clean line; ``ids``: its matching pattern ids when already known."""
        lineno, rank_map = state.lineno, state.rank_map
        prefix = hosts.parse_prefix(text)
        rank_map.observe(prefix)
        if prefix.rank is not None:
            state.ranks_seen.add(prefix.rank)
        reading_root = state.root_reader.active or _ROOT_START in text
        if reading_root and (found_root := state.root_reader.feed(lineno, text)) is not None:
            state.root = found_root
            if found_root.host and found_root.rank is not None:
                rank_map.learn(found_root.host, found_root.rank)
        serious = False
        hits = state.hits
        for pattern_id in self._matcher.match(text) if ids is None else ids:
            spec = self._specs.get(pattern_id)
            if spec is None:
                continue
            serious = serious or spec.severity in (vocab.Severity.FATAL, vocab.Severity.ERROR)
            hits[pattern_id] = hits.get(pattern_id, 0) + 1
            if hits[pattern_id] > MAX_HITS_PER_PATTERN:
                continue
            fields = self._matcher.extract(pattern_id, text)
            line = signals.LogLine(text=text, lineno=lineno, received_at=0.0, source=state.path)
            state.evidence.append(stream.evidence_from_hit(spec, line, prefix, fields, at=progress.line_time(text)))
        if serious:
            state.progress_since_error = 0
            return
        parsed = self._progress.parse(text)
        if parsed is None:
            return
        state.progress_since_error += 1
        state.post.recent_progress.append((lineno, text))
        if parsed.rate is not None:
            state.skipped += 1
            if state.skipped >= state.stride:
                self._keep(state, (lineno, text[:_SAMPLE_CHARS], prefix.rank, prefix.node, parsed.rate))

    def _finish(self, state: _State) -> Result:
        path, lineno, rank_map, root = state.path, state.lineno, state.rank_map, state.root
        progress_since_error = state.progress_since_error
        samples = [_sample(path, item) for item in state.samples]
        evidence = [_with_node(e, rank_map) for e in state.evidence]
        cause = first_cause.find_first_cause(
            evidence, hints=self._hints, root_cause=root, node_of=rank_map.node_of, ranks_seen=state.ranks_seen
        )
        post = state.post
        post.finish()
        if cause is not None and progress_since_error < RECOVERED_AFTER:
            verdict = refine.crash(
                refine.Crash(
                    cause.symptom,
                    cause.category,
                    cause.attribution,
                    cause.evidence,
                    f"first cause at line {cause.evidence[0].line}",
                ),
                post,
            )
            return Result(
                path,
                verdict.symptom,
                verdict.category,
                verdict.attribution,
                verdict.evidence,
                cause.suspect_nodes if verdict.keep_suspects else [],
                cause.suspect_ranks if verdict.keep_suspects else [],
                lines=lineno,
                summary=verdict.summary,
            )
        context = cause.evidence if cause is not None else [e for e in evidence if e.severity != vocab.Severity.INFO]
        silence = postmortem.silence(post)
        if silence is not None:
            return Result(
                path,
                vocab.Symptom.HANG,
                vocab.Category.PROGRESS_STALLED,
                vocab.Attribution.UNKNOWN,
                silence.evidence,
                context=context,
                lines=lineno,
                summary=silence.summary,
            )
        drop = drops.find_drop(samples, self._settings)
        anomaly = stream.straggler_anomaly(drop, drop.since, rank_map) if drop is not None else None
        if anomaly is None and post.stragglers:
            anomaly = post.stragglers[0]
            nodes = [node for rank in anomaly.suspect_ranks if (node := rank_map.node_of(rank)) is not None]
            anomaly = anomaly.model_copy(update={"suspect_nodes": list(dict.fromkeys(nodes))})
        if anomaly is not None:
            return Result(
                path,
                vocab.Symptom.STRAGGLER,
                vocab.Category.THROUGHPUT_DROP,
                vocab.Attribution.UNKNOWN,
                anomaly.evidence,
                anomaly.suspect_nodes,
                anomaly.suspect_ranks,
                context=context,
                lines=lineno,
                summary=anomaly.summary,
            )
        summary = "errors followed by continued progress (survived)" if cause is not None else ""
        return Result(
            path,
            vocab.Symptom.HEALTHY,
            vocab.Category.NONE,
            vocab.Attribution.NONE,
            context=context,
            lines=lineno,
            summary="; ".join(part for part in (summary, postmortem.no_clock_note(post)) if part),
        )


def _with_node(item: anomalies.Evidence, rank_map: hosts.RankMap) -> anomalies.Evidence:
    """Fill in the node of a rank-only line from what the whole file taught the rank map."""
    if item.node is None and item.rank is not None and (node := rank_map.node_of(item.rank)) is not None:
        return item.model_copy(update={"node": node})
    return item
