"""Job output read from Grafana Loki: LogQL ``query_range`` to catch up, the ``tail`` WebSocket live.

Clusters that ship job output to Loki (promtail, Alloy, Fluent Bit, Vector) give Trainguard the
same lines the output files hold, tagged with stream labels. This module turns Loki's HTTP API
into ``signals.LogLine`` objects per workload, without losing or repeating a line:

- **catch-up** (start, after a gap, after ``dropped_entries``): ``GET /loki/api/v1/query_range``
  with ``direction=forward``, ``start``/``end`` in nanoseconds and a ``limit``. A full page means
  there may be more: the next page starts *at* the last timestamp (not after it: several entries
  can share one nanosecond, and the page may have ended between them), and the entries of that
  nanosecond already handed out are dropped as duplicates.
- **live**: the ``/loki/api/v1/tail`` WebSocket (``query``, ``start``, ``delay_for``, ``limit``).
  A message carries ``streams`` (``{"stream": labels, "values": [[ns, line], ...]}``) and
  ``dropped_entries`` (``{"labels", "timestamp"}``: lines Loki could not send us in time); dropped
  entries trigger a catch-up query over their time span, so they are read after all.
- **positions**: per Loki stream, the nanosecond timestamp of the last line read and short
  hashes of the lines read at exactly that nanosecond (``StreamPosition``, ``restore``): a
  reader restarted from them catches up from there, inclusive, and drops what it had read. A
  bounded set of recent entries drops the overlap of a reconnect (a tail reopened at the last
  timestamp replays lines we have). The engine stores positions per *output stream* of a
  workload, as far as detection consumed them (``signals.loki_book``), and places the reader's
  first catch-up there (``start_at``).
- **labels -> workload**: the stream labels name the job, attempt, rank and host; which label
  carries which is configurable (``LokiLabels``), since every shipper names them differently.
- **errors**: HTTP 4xx/5xx, timeouts, refused connections, malformed JSON and WebSocket closes
  are logged once per change of state and retried with capped exponential backoff; the reader
  never raises into the engine, and a failed page leaves the positions where they were, so the
  retry reads the same lines again (nothing is lost). A line longer than ``max_line`` bytes is
  cut with a marker saying how much was dropped (as the file tailer does).

The wire itself (``LokiClient``, the parsing of both endpoints' answers, paging) is
``signals.loki_api``; its names are re-exported here, where the shells and tests find them.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field

from trainguard.model import clock as clock_mod
from trainguard.model import signals
from trainguard.model.times import NS
from trainguard.signals.loki_api import (
    DEFAULT_PAGE_LIMIT,
    MAX_BODY,
    MAX_PAGE_LIMIT,
    SEEN_HASH_CHARS,
    AnswerTooLarge,
    LokiAuth,
    LokiClient,
    LokiEntry,
    LokiError,
    StreamLabels,
    TailMessage,
    line_hash,
    parse_query_range,
    parse_streams,
    parse_tail_message,
    stream_key,
)
from trainguard.signals.tailer import MARKER

__all__ = [
    "DEFAULT_MAX_LINE", "DEFAULT_PAGE_LIMIT", "MARKER", "MAX_BODY", "MAX_PAGE_LIMIT", "MAX_SEEN_STORED", "NS",
    "RECENT_PER_STREAM", "SEEN_HASH_CHARS", "SOURCE", "AnswerTooLarge", "LokiAuth", "LokiClient", "LokiEntry",
    "LokiError", "LokiLabels", "LokiLine", "LokiReader", "StreamLabels", "StreamPosition", "TailMessage",
    "cut_line", "line_hash", "parse_query_range", "parse_streams", "parse_tail_message", "stream_key",
]

logger = logging.getLogger(__name__)

SOURCE = "loki"
"""``LogLine.source`` and ``StreamPosition.source`` of lines read from Loki."""

DEFAULT_MAX_LINE = 64 * 1024
"""Bytes kept per line, as for files: any stack-trace line fits, memory stays bounded."""

MAX_SEEN_STORED = 8
"""Hashes stored per position: ``8 * 8`` characters fill the 64-character fingerprint column."""

RECENT_PER_STREAM = 4096
"""Entries remembered per stream to drop the overlap of a reconnect or a catch-up."""


@dataclass(frozen=True, slots=True)
class LokiLabels:
    """Which stream label carries which fact (shippers name them differently)."""

    job: str = "job_id"
    attempt: str = "attempt"
    rank: str = "rank"
    host: str = "host"



# ------------------------------------------------------------------------------ positions


@dataclass(frozen=True, slots=True)
class StreamPosition:
    """Where reading one Loki stream stands, in the shape of a stored file position.

    ``path`` is ``loki:`` + the stream's selector, ``offset`` the nanosecond timestamp of the last
    line handed out, ``lineno`` the lines handed out so far, ``fingerprint`` the short hashes of
    the (at most ``MAX_SEEN_STORED`` last) lines handed out at exactly ``offset``.
    """

    workload: str
    attempt: int | None
    path: str
    offset: int
    lineno: int
    fingerprint: str = ""
    source: str = SOURCE


@dataclass(slots=True)
class _Cursor:
    workload: str
    attempt: int | None
    ns: int = 0
    seen: list[str] = field(default_factory=list)  # hashes of the lines handed out at ``ns``
    lineno: int = 0
    recent: collections.OrderedDict[tuple[int, str], None] = field(default_factory=collections.OrderedDict)
    dirty: bool = False

    def fresh(self, ns: int, digest: str) -> bool:
        if (ns, digest) in self.recent:
            return False
        if ns < self.ns:
            # Before the position and not among the recent lines: a line we never saw (a late
            # arrival -- Loki accepts out-of-order writes within a window -- or one the tail
            # dropped) when it is within the span this process has read of the stream; older
            # than that, a replay of lines read before (by an earlier process, or before the
            # recent window).
            return bool(self.recent) and ns >= next(iter(self.recent))[0]
        return not (ns == self.ns and digest in self.seen)

    def take(self, ns: int, digest: str) -> int:
        self.recent[(ns, digest)] = None
        if len(self.recent) > RECENT_PER_STREAM:
            self.recent.popitem(last=False)
        if ns > self.ns:
            self.ns, self.seen = ns, [digest]
        elif ns == self.ns:
            self.seen.append(digest)
        self.lineno += 1
        self.dirty = True
        return self.lineno

    def position(self, path: str) -> StreamPosition:
        return StreamPosition(self.workload, self.attempt, path, self.ns, self.lineno,
                              "".join(self.seen[-MAX_SEEN_STORED:]))


# ------------------------------------------------------------------------------ reader


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def cut_line(line: str, max_line: int) -> str:
    """At most ``max_line`` UTF-8 bytes of ``line``, with a marker saying how many were dropped."""
    raw = line.encode("utf-8", errors="surrogateescape")
    if len(raw) <= max_line:
        return line
    kept = raw[:max_line].decode("utf-8", errors="ignore")
    return f"{kept} {MARKER} {len(raw) - max_line} bytes of this line dropped"


@dataclass(frozen=True, slots=True)
class LokiLine:
    """A line for one workload: the ``LogLine`` detection reads, and the attempt its labels name."""

    workload: str
    attempt: int | None
    line: signals.LogLine
    entry: LokiEntry


class LokiReader:
    """Reads the job output of every stream ``query`` selects; lines are collected per workload.

    ``run()`` is the long-lived task (catch-up, then tail; reconnect and catch up after any
    failure); ``drain(workload)`` hands the lines read since the last call to the engine's
    tailing round; ``positions()`` are the positions that moved, to be stored. ``restore()``
    puts stored positions back before ``run()`` starts.
    """

    def __init__(
        self,
        client: LokiClient,
        query: str,
        clock: clock_mod.Clock,
        *,
        labels: LokiLabels | None = None,
        since_s: float = 3600.0,
        page_limit: int = DEFAULT_PAGE_LIMIT,
        delay_for_s: int = 0,
        max_line: int = DEFAULT_MAX_LINE,
        max_pending: int = 200_000,
        backoff_s: tuple[float, float] = (0.5, 30.0),
        now_ns: Callable[[], int] = time.time_ns,
        on_lines: Callable[[], Awaitable[None] | None] | None = None,
    ) -> None:
        self.client = client
        self.query = query
        self.labels = labels or LokiLabels()
        self._clock = clock
        self._since_ns = int(since_s * NS)
        self._page_limit = page_limit
        self._delay_for = delay_for_s
        self._max_line = max_line
        self._max_pending = max_pending
        self.overflow = 0
        """Lines dropped (oldest first) because more than ``max_pending`` waited to be drained."""
        self._backoff = backoff_s
        self._now_ns = now_ns
        self._on_lines = on_lines
        self._cursors: dict[str, _Cursor] = {}  # stream key -> cursor
        self._pending: dict[str, list[LokiLine]] = collections.defaultdict(list)
        self._unmapped: set[str] = set()
        self._resume_ns: int | None = None  # the newest timestamp handed out (or restored)
        self._floor_ns: int | None = None  # ``start_at``
        self._failing: str | None = None
        self.connected = asyncio.Event()
        """Set while the tail socket is open."""
        self.changed = asyncio.Event()
        """Set on every change of state (lines read, connected, failed); whoever waits clears it."""
        self.catch_ups = 0
        self.errors = 0

    # -------------------------------------------------------------- positions

    def restore(self, positions: Iterable[StreamPosition]) -> None:
        """Stored positions: reading resumes at each stream's timestamp, dropping what was read there."""
        for p in positions:
            if p.source != SOURCE or not p.path.startswith("loki:"):
                continue
            key = p.path.removeprefix("loki:")
            seen = [p.fingerprint[i:i + SEEN_HASH_CHARS] for i in range(0, len(p.fingerprint), SEEN_HASH_CHARS)]
            self._cursors[key] = _Cursor(p.workload, p.attempt, p.offset, seen, p.lineno)
            self._resume_ns = max(self._resume_ns or 0, p.offset)

    def positions(self, *, all_streams: bool = False) -> list[StreamPosition]:
        """The positions that moved since the last call (every one with ``all_streams``)."""
        out = []
        for key, cursor in self._cursors.items():
            if cursor.dirty or all_streams:
                out.append(cursor.position("loki:" + key))
                cursor.dirty = False
        return out

    def drain(self, workload: str) -> list[LokiLine]:
        """The lines of ``workload`` read since the last call, oldest first."""
        return self._pending.pop(workload, [])

    def drain_entries(self) -> list[tuple[LokiEntry, signals.LogLine]]:
        """Every line read since the last call, of every workload, oldest first."""
        out = [(x.entry, x.line) for lines in self._pending.values() for x in lines]
        self._pending.clear()
        out.sort(key=lambda pair: pair[0].ns)
        return out

    def start_at(self, ns: int | None) -> None:
        """Where the first catch-up starts when no stream position is known (e.g. an attempt's start)."""
        self._floor_ns = ns

    def pending(self) -> int:
        """Lines read and not yet drained."""
        return sum(len(lines) for lines in self._pending.values())

    def workloads(self) -> list[str]:
        """Workloads with lines waiting."""
        return list(self._pending)

    # -------------------------------------------------------------- intake

    def _accept(self, entries: Sequence[LokiEntry]) -> int:
        taken = 0
        for e in entries:
            key = e.stream_key
            cursor = self._cursors.get(key)
            if cursor is None:
                labels = dict(e.stream)
                workload = labels.get(self.labels.job)
                if not workload:
                    if key not in self._unmapped:
                        self._unmapped.add(key)
                        logger.warning("Loki stream %s has no %r label: its lines cannot be charged to a job "
                                       "(set the Loki job label setting)", key, self.labels.job)
                    continue
                cursor = self._cursors[key] = _Cursor(workload, _int_or_none(labels.get(self.labels.attempt)))
            digest = e.line_hash
            if not cursor.fresh(e.ns, digest):
                continue
            lineno = cursor.take(e.ns, digest)
            labels = dict(e.stream)
            text = cut_line(e.line.rstrip("\r\n"), self._max_line)
            line = signals.LogLine(text=text, lineno=lineno, received_at=self._clock.now(),
                                   source=f"{SOURCE}:{key}", node=labels.get(self.labels.host) or None,
                                   rank=_int_or_none(labels.get(self.labels.rank)))
            waiting = self._pending[cursor.workload]
            waiting.append(LokiLine(cursor.workload, cursor.attempt, line, e))
            if len(waiting) > self._max_pending:  # nobody drains: memory stays bounded, the loss is counted
                del waiting[0]
                self.overflow += 1
            self._resume_ns = max(self._resume_ns or 0, e.ns)
            taken += 1
        if taken:
            self.changed.set()
        return taken

    async def _notify(self) -> None:
        if self._on_lines is not None:
            result = self._on_lines()
            if result is not None:
                await result

    async def catch_up(self, start_ns: int | None = None, end_ns: int | None = None) -> int:
        """Read ``[start_ns, end_ns)`` (default: from the resume point to now) through ``query_range``."""
        end = end_ns if end_ns is not None else self._now_ns()
        start = start_ns if start_ns is not None else self._start_ns(end)
        self.catch_ups += 1
        self.changed.set()
        taken = 0
        async for page in self.client.pages(self.query, start, end, self._page_limit):
            taken += self._accept(page)
            await self._notify()
        return taken

    def _start_ns(self, now: int) -> int:
        if self._resume_ns is not None:
            # The newest line read (or restored), inclusive: lines are read in time order across
            # the streams, so every stream is read up to it; a stream that went quiet long ago
            # does not send every reconnect back through its whole history.
            return self._resume_ns
        return self._floor_ns or now - self._since_ns

    # -------------------------------------------------------------- the task

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Catch up, tail, and on any failure back off, catch up again and reopen the tail. Never raises
        (but ``CancelledError``): Loki being away costs freshness, not lines."""
        stop = stop or asyncio.Event()
        failures = 0
        while not stop.is_set():
            try:
                await self.catch_up()
                end = self._now_ns()
                async with self.client.tail(self.query, self._tail_start(end), delay_for_s=self._delay_for,
                                            limit=self._page_limit) as messages:
                    self.connected.set()
                    self.changed.set()
                    self._recovered()
                    failures = 0
                    async for message in messages:
                        if self._accept(message.entries):
                            await self._notify()
                        if message.dropped:
                            await self._dropped(message.dropped)
                    raise LokiError("tail socket closed by the server")
            except Exception as exc:  # whatever Loki (or a bug of ours) does, the reader retries, never dies
                self.connected.clear()
                failures += 1
                self.errors += 1
                self.changed.set()
                self._failed(str(exc) if isinstance(exc, LokiError) else f"unexpected {type(exc).__name__}: {exc}")
                delay = min(self._backoff[1], self._backoff[0] * 2 ** min(failures - 1, 16))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay * random.uniform(0.8, 1.2))
        self.connected.clear()

    def _tail_start(self, now: int) -> int:
        """Where the tail starts: at the newest line read (inclusive: the overlap is dropped), so a line
        that reached Loki between the catch-up and the tail's start is read by the tail."""
        return self._resume_ns if self._resume_ns is not None else now

    async def _dropped(self, dropped: Sequence[tuple[StreamLabels, int]]) -> None:
        """Loki dropped lines from the tail: read their span through ``query_range``."""
        first = min(ns for _, ns in dropped)
        last = max(ns for _, ns in dropped)
        logger.warning("Loki dropped %d tail entries (%d..%d ns); reading them with query_range", len(dropped),
                       first, last)
        await self.catch_up(first, max(last + 1, self._now_ns()))

    def _failed(self, reason: str) -> None:
        if self._failing != reason:
            logger.warning("Loki %s: %s; retrying with backoff (no line is lost: reading resumes at the last "
                           "position)", self.client.base_url, reason)
        self._failing = reason

    def _recovered(self) -> None:
        if self._failing is not None:
            logger.warning("Loki %s: tail connected again", self.client.base_url)
        self._failing = None
