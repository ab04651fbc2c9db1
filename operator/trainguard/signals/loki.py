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

Loki's query and tail API is documented at https://grafana.com/docs/loki/latest/reference/loki-http-api/
(``query_range``, ``tail``); the tests replay responses of exactly that shape from a local server.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import json
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import aiohttp

from trainguard.model import clock as clock_mod
from trainguard.model import signals
from trainguard.signals import linehash
from trainguard.signals.tailer import MARKER

logger = logging.getLogger(__name__)

SOURCE = "loki"
"""``LogLine.source`` and ``StreamPosition.source`` of lines read from Loki."""

DEFAULT_PAGE_LIMIT = 1000
"""Entries per ``query_range`` page: well below Loki's default ``max_entries_limit_per_query`` (5000)."""

MAX_PAGE_LIMIT = 5000
"""Loki's default ``max_entries_limit_per_query``: a page is never asked to be larger."""

DEFAULT_MAX_LINE = 64 * 1024
"""Bytes kept per line, as for files: any stack-trace line fits, memory stays bounded."""

SEEN_HASH_CHARS = 8
"""Hex characters of one line hash in a stored position (32 bits: lines that share a stream and a
nanosecond are few, so a collision among them is negligible)."""

MAX_SEEN_STORED = 8
"""Hashes stored per position: ``8 * 8`` characters fill the 64-character fingerprint column."""

MAX_BODY = 64 * 1024 * 1024
"""Bytes of one answer or tail message read at most: a page of long lines is asked again smaller."""

RECENT_PER_STREAM = 4096
"""Entries remembered per stream to drop the overlap of a reconnect or a catch-up."""

NS = 1_000_000_000


class LokiError(Exception):
    """A request to Loki failed; ``status`` is the HTTP status (None: no answer, or unreadable)."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class AnswerTooLarge(LokiError):
    """An answer longer than ``MAX_BODY``: the page is asked again with a smaller limit."""


@dataclass(frozen=True, slots=True)
class LokiLabels:
    """Which stream label carries which fact (shippers name them differently)."""

    job: str = "job_id"
    attempt: str = "attempt"
    rank: str = "rank"
    host: str = "host"


@dataclass(frozen=True, slots=True)
class LokiAuth:
    """How to authenticate: an optional tenant (``X-Scope-OrgID``) and a bearer token or basic auth."""

    tenant: str | None = None
    bearer_token: str | None = None
    username: str | None = None
    password: str | None = None

    def headers(self) -> dict[str, str]:
        out: dict[str, str] = {}
        if self.tenant:
            out["X-Scope-OrgID"] = self.tenant
        if self.bearer_token:
            out["Authorization"] = f"Bearer {self.bearer_token}"
        elif self.username is not None:
            pair = f"{self.username}:{self.password or ''}".encode()
            out["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
        return out


StreamLabels = tuple[tuple[str, str], ...]
"""A stream's labels, sorted: hashable, and the same for the same stream in every response."""


@dataclass(frozen=True, slots=True)
class LokiEntry:
    """One log entry: its stream, its timestamp in nanoseconds, its text."""

    ns: int
    stream: StreamLabels
    line: str

    @property
    def stream_key(self) -> str:
        return stream_key(self.stream)

    @property
    def line_hash(self) -> str:
        return line_hash(self.line)


@dataclass(frozen=True, slots=True)
class TailMessage:
    """One WebSocket message of ``/loki/api/v1/tail``: entries and the (labels, ns) Loki dropped."""

    entries: list[LokiEntry]
    dropped: list[tuple[StreamLabels, int]]


def stream_key(labels: StreamLabels) -> str:
    """The LogQL selector form of a stream, e.g. ``{host="node1",job_id="42"}`` (stable, readable)."""
    return "{" + ",".join(f"{k}={json.dumps(v)}" for k, v in labels) + "}"


def line_hash(line: str) -> str:
    return linehash.digest(line, chars=SEEN_HASH_CHARS)


# ------------------------------------------------------------------------------ parsing


def _labels(raw: object) -> StreamLabels:
    if not isinstance(raw, Mapping):
        raise ValueError("stream labels are not an object")
    return tuple(sorted((str(k), str(v)) for k, v in raw.items()))


def _ns(raw: object) -> int:
    if isinstance(raw, str) and raw.isdigit():
        return int(raw)
    raise ValueError(f"timestamp {raw!r} is not a nanosecond epoch string")


def parse_streams(result: object) -> list[LokiEntry]:
    """Entries of a ``streams`` result (``[{"stream": {...}, "values": [[ns, line], ...]}]``), by time.

    Several streams arrive one after the other; sorting by (ns, stream) interleaves them as they
    happened. ``sorted`` is stable, so lines of one stream at one nanosecond keep Loki's order.
    """
    if not isinstance(result, list):
        raise ValueError("result is not a list of streams")
    out: list[LokiEntry] = []
    for item in result:
        if not isinstance(item, Mapping):
            raise ValueError("a stream is not an object")
        labels = _labels(item.get("stream"))
        values = item.get("values")
        if not isinstance(values, list):
            raise ValueError("stream values are not a list")
        for value in values:
            if not isinstance(value, list) or len(value) < 2 or not isinstance(value[1], str):
                raise ValueError("a value is not [ns, line]")
            out.append(LokiEntry(_ns(value[0]), labels, value[1]))
    out.sort(key=lambda e: (e.ns, e.stream))
    return out


def parse_query_range(body: object) -> list[LokiEntry]:
    """The entries of a ``query_range`` answer; a non-stream result (a metric query) is an error."""
    if not isinstance(body, Mapping) or body.get("status") != "success":
        raise ValueError("answer is not {\"status\": \"success\", ...}")
    data = body.get("data")
    if not isinstance(data, Mapping):
        raise ValueError("answer has no data object")
    if data.get("resultType") != "streams":
        raise ValueError(f"resultType is {data.get('resultType')!r}, not 'streams' (the query must select log lines)")
    return parse_streams(data.get("result"))


def parse_tail_message(body: object) -> TailMessage:
    if not isinstance(body, Mapping):
        raise ValueError("tail message is not an object")
    entries = parse_streams(body.get("streams") or [])
    dropped: list[tuple[StreamLabels, int]] = []
    for item in body.get("dropped_entries") or []:
        if not isinstance(item, Mapping):
            raise ValueError("a dropped entry is not an object")
        dropped.append((_labels(item.get("labels")), _ns(item.get("timestamp"))))
    return TailMessage(entries, dropped)


# ------------------------------------------------------------------------------ client


class LokiClient:
    """The two Loki endpoints the reader needs, over one aiohttp session."""

    def __init__(self, base_url: str, *, auth: LokiAuth | None = None, timeout_s: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = (auth or LokiAuth()).headers()
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # No connection limit: every tracked job holds its tail WebSocket open on this session,
            # and aiohttp's default pool of 100 would leave the catch-up queries waiting.
            self._session = aiohttp.ClientSession(headers=self._headers, connector=aiohttp.TCPConnector(limit=0))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def query_range(self, query: str, start_ns: int, end_ns: int, limit: int) -> list[LokiEntry]:
        """One page, oldest first. Raises ``LokiError`` on any failure (status, timeout, bad JSON)."""
        params = {"query": query, "start": str(start_ns), "end": str(end_ns), "limit": str(limit),
                  "direction": "forward"}
        url = self.base_url + "/loki/api/v1/query_range"
        try:
            async with self._client().get(url, params=params, timeout=self._timeout) as response:
                body = await response.content.read(MAX_BODY + 1)
                if len(body) > MAX_BODY:
                    raise AnswerTooLarge(f"query_range answer is longer than {MAX_BODY} bytes (limit {limit})",
                                         status=response.status)
                text = body.decode("utf-8", errors="replace")
                if response.status != 200:
                    raise LokiError(f"query_range answered {response.status}: {text.strip()[:200]}",
                                    status=response.status)
                try:
                    return parse_query_range(json.loads(text))
                except ValueError as exc:  # json.JSONDecodeError is a ValueError
                    raise LokiError(f"query_range answer is malformed: {exc}", status=response.status) from exc
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise LokiError(f"query_range failed: {type(exc).__name__}: {exc}") from exc

    async def pages(self, query: str, start_ns: int, end_ns: int, limit: int) -> AsyncIterator[list[LokiEntry]]:
        """Every entry in ``[start_ns, end_ns)``, page by page, none twice.

        A full page continues at its last timestamp; the entries of that nanosecond the previous
        page already had are dropped. A page that is all one nanosecond and brings nothing new
        is asked again with a larger limit (up to ``MAX_PAGE_LIMIT``); beyond that the rest of
        that nanosecond cannot be paged through Loki's API and is skipped with a warning.
        """
        at = start_ns
        border: set[tuple[StreamLabels, int, str]] = set()
        size = base = limit  # ``base``: the page size, lowered for good when an answer was too large
        while at < end_ns:
            try:
                page = await self.query_range(query, at, end_ns, size)
            except AnswerTooLarge:
                if size == 1:
                    raise
                size = base = max(1, size // 4)
                logger.warning("Loki: a page of %s was too large; asking %d lines at a time", query, size)
                continue
            fresh = [e for e in page if (e.stream, e.ns, e.line) not in border]
            if fresh:
                yield fresh
            if len(page) < size:
                return
            last = page[-1].ns
            if not fresh:  # a full page of one nanosecond we already have: no progress
                if size < MAX_PAGE_LIMIT:
                    size = min(size * 2, MAX_PAGE_LIMIT)
                    continue
                logger.warning("Loki: more than %d lines at one nanosecond (%d) for %s; the rest of them are "
                               "skipped", MAX_PAGE_LIMIT, last, query)
                at, border, size = last + 1, set(), base
                continue
            if last != at:
                border = set()
            border |= {(e.stream, e.ns, e.line) for e in page if e.ns == last}
            at, size = last, base

    @contextlib.asynccontextmanager
    async def tail(self, query: str, start_ns: int, *, delay_for_s: int = 0,
                   limit: int = DEFAULT_PAGE_LIMIT) -> AsyncIterator[AsyncIterator[TailMessage]]:
        """Open the tail WebSocket; yields an iterator of its messages (ends when the socket closes).

        A malformed message raises ``LokiError`` from the iterator (the caller reconnects and
        catches up); an error frame or a close ends the iteration.
        """
        url = self.base_url + "/loki/api/v1/tail"
        params = {"query": query, "start": str(start_ns), "delay_for": str(delay_for_s), "limit": str(limit)}
        try:
            ws = await self._client().ws_connect(url, params=params, heartbeat=30.0, max_msg_size=MAX_BODY)
        except aiohttp.WSServerHandshakeError as exc:
            raise LokiError(f"tail refused: {exc.status} {exc.message}", status=exc.status) from exc
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise LokiError(f"tail connect failed: {type(exc).__name__}: {exc}") from exc

        async def messages() -> AsyncIterator[TailMessage]:
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.TEXT:
                    try:
                        yield parse_tail_message(json.loads(msg.data))
                    except ValueError as exc:
                        raise LokiError(f"tail message is malformed: {exc}") from exc
                elif msg.type == aiohttp.WSMsgType.ERROR:
                    raise LokiError(f"tail socket error: {ws.exception()}")

        try:
            yield messages()
        finally:
            await ws.close()


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
