"""Job output read from a VictoriaLogs server instead of the output files (``sources.LogBook``).

Place: under ``signals/``, chosen per installation (``victorialogs_url``). A shipper (Vector,
Fluent Bit, ...) pushes each job's output lines to VictoriaLogs with fields naming the job
(``job_field``, default ``job_id``: the scheduler's job id), the output file (``path_field``,
default ``filename``: the job's ``StdOut``/``StdErr`` path) and the node (``host_field``, default
``host``). One ``VictoriaLogsBook`` per tracked workload follows every row of its job id:

- a **live tail** (``/select/logsql/tail``, ``offset=0s``) in its own task, for latency. The
  server's tail skips, per stream, rows not newer than the last row it sent, and rows that
  became searchable after their time window passed; so beside it
- a **sweep** (``/select/logsql/query``, sorted by ``_time``, paginated) runs on start, after
  every reconnect and every ``sweep_s``: it reads from ``window_s`` seconds before the start of
  the last complete sweep (on the first one: from the stored position or the attempt's start),
  so it fills what the tail missed and is the catch-up after gaps, outages and restarts, however
  long they were.

Both feed one de-duplication: a row is identified by (time in ns, ``_stream_id``, a hash of the
message), remembered while a sweep may still read it. A row that becomes searchable more than
``window_s`` after the last complete sweep began, with a time before that, is read by neither
and is dropped (counted in the log). The window also covers clock skew between the engine and
the shippers up to that much.

Position and attempts: kept as for the Loki source, by ``signals.storebook`` (a row's position is
its time in ns plus the hashes of the rows handed out at that time; a row belongs to the attempt
running at its time, from the scheduler's start time of the attempt on).

Rank: ``rank_field`` (default ``rank``), when a row has it, is the rank of the line.

Node: ``host_field`` names the node a line came from only for streams that are not the job's
shared ``StdOut``/``StdErr`` file (per-node files, container logs): the shared file is written
by the batch host for every rank, so there the rank/node prefix in the text decides.

Hostile input: a row longer than ``max_row_bytes`` in the server's answer is dropped (a marker
line says so), a message is cut at ``max_line`` characters, binary junk arrives as replacement
characters (the server stores text) and is cleaned further by detection. An unreachable server
is one log line per change of state and retries with backoff; the engine never waits on it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp

from trainguard.model import clock as clock_mod
from trainguard.model import signals, times
from trainguard.signals import fileio, linehash, sources
from trainguard.signals.storebook import NS, Out, StoreBook, Stream
from trainguard.signals.tailer import MARKER

logger = logging.getLogger(__name__)

KIND = "victorialogs"


@dataclass(frozen=True)
class Config:
    """How to reach the server and read its rows."""

    url: str
    job_field: str = "job_id"
    host_field: str = "host"
    rank_field: str = "rank"
    """Field with the rank of the process that printed the line, when the shipper knows it (per-rank
    files, ``srun --output=%t``); otherwise the ``srun --label`` prefix in the text gives it."""
    path_field: str = "filename"
    tail_offset_s: float = 0.0
    """The tail's ``offset``: 0 for the lowest latency (the sweep catches rows it misses)."""
    refresh_s: float = 0.2
    """The tail's ``refresh_interval``."""
    sweep_s: float = 2.0
    """Seconds between two sweep queries while the tail runs."""
    window_s: float = 30.0
    """How far back each sweep looks, and how long row identities are remembered."""
    page: int = 2000
    """Rows per sweep query; a backlog is read in pages."""
    max_line: int = 64 * 1024
    """Characters of a message kept (as the file tailer keeps bytes)."""
    max_row_bytes: int = 4 * 1024 * 1024
    """Longest JSON row accepted from the server; longer ones are dropped with a marker."""
    max_buffer: int = 200_000
    """Rows held between two reads at most (a job whose attempt has not started is not read)."""
    timeout_s: float = 10.0
    """Connect/read timeout of a query (the tail has no read timeout: it may be silent)."""
    max_backoff_s: float = 30.0


def parse_time(text: str) -> int:
    """RFC 3339 with up to nanoseconds (VictoriaLogs' ``_time``) -> ns since the epoch."""
    return times.parse_rfc3339_ns(text)


def format_time(ns: int) -> str:
    """ns since the epoch -> RFC 3339 with nanoseconds, for LogsQL time filters."""
    return times.rfc3339_ns(ns)


def quote(value: str) -> str:
    """A LogsQL quoted string (JSON escapes are a subset of what LogsQL accepts)."""
    return json.dumps(value)


def row_hash(stream_id: str, message: str) -> str:
    return linehash.digest(stream_id, message, chars=16, errors="replace")


@dataclass(frozen=True, slots=True)
class Row:
    """One row as read from the server."""

    ns: int
    stream_id: str
    message: str
    host: str
    path: str
    rank: int | None = None

    @property
    def key(self) -> tuple[int, str]:
        return self.ns, row_hash(self.stream_id, self.message)


class Unavailable(Exception):
    """The server did not answer as expected (down, refused, an error status)."""


class Client:
    """HTTP access to one VictoriaLogs server, shared by all books of an engine.

    Reachability is logged once per change of state (``reachable``), never once per retry.
    """

    def __init__(self, config: Config) -> None:
        self.config = config
        self.reachable: bool | None = None
        self.last_error = ""
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # identity: with gzip the server holds a tail's headers until its first row. No connection
            # limit: every tracked workload holds one tail open, and a pool of 100 would starve the sweeps.
            self._session = aiohttp.ClientSession(headers={"Accept-Encoding": "identity"},
                                                  connector=aiohttp.TCPConnector(limit=0))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def ok(self) -> None:
        if self.reachable is False:
            logger.warning("VictoriaLogs at %s reachable again", self.config.url)
        self.reachable = True

    def failed(self, exc: BaseException) -> None:
        self.last_error = f"{type(exc).__name__}: {exc}"[:300]
        if self.reachable is not False:
            logger.error("VictoriaLogs at %s unreachable: %s (retrying with backoff; one line again when it is "
                         "back)", self.config.url, self.last_error)
        self.reachable = False

    async def query(self, logsql: str) -> list[dict[str, Any]]:
        """Rows of one ``/select/logsql/query`` (its answer is JSON lines)."""
        url = self.config.url.rstrip("/") + "/select/logsql/query"
        timeout = aiohttp.ClientTimeout(total=self.config.timeout_s)
        try:
            async with self._http().post(url, data={"query": logsql}, timeout=timeout) as resp:
                if resp.status != 200:
                    raise Unavailable(f"query answered {resp.status}: {(await resp.text())[:200]}")
                rows = [row async for row in self._rows(resp)]
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise Unavailable(str(exc) or type(exc).__name__) from exc
        self.ok()
        return rows

    @contextlib.asynccontextmanager
    async def tail(self, logsql: str) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        """An open ``/select/logsql/tail``: its rows as they come."""
        url = self.config.url.rstrip("/") + "/select/logsql/tail"
        params = {"query": logsql, "offset": f"{self.config.tail_offset_s:g}s",
                  "refresh_interval": f"{int(self.config.refresh_s * 1000)}ms"}
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.config.timeout_s)
        try:
            async with self._http().post(url, data=params, timeout=timeout) as resp:
                if resp.status != 200:
                    raise Unavailable(f"tail answered {resp.status}: {(await resp.text())[:200]}")
                self.ok()
                yield self._rows(resp)
        except (aiohttp.ClientError, OSError) as exc:
            raise Unavailable(str(exc) or type(exc).__name__) from exc

    async def _rows(self, resp: aiohttp.ClientResponse) -> AsyncIterator[dict[str, Any]]:
        """JSON lines of a response, each bounded (``max_row_bytes``); a too long or broken row
        yields ``{"_trainguard_dropped": n}`` instead, so the reader can say so."""
        pending = bytearray()
        skipping = 0
        async for chunk in resp.content.iter_any():
            start = 0
            while True:
                nl = chunk.find(b"\n", start)
                piece = chunk[start:] if nl < 0 else chunk[start:nl]
                if skipping:
                    skipping += len(piece)
                elif len(pending) + len(piece) > self.config.max_row_bytes:
                    skipping = len(pending) + len(piece)
                    pending.clear()
                else:
                    pending += piece
                if nl < 0:
                    break
                start = nl + 1
                if skipping:
                    yield {"_trainguard_dropped": skipping}
                    skipping = 0
                    continue
                if pending.strip():
                    try:
                        row = json.loads(bytes(pending))
                    except ValueError:
                        row = {"_trainguard_dropped": len(pending)}
                    if isinstance(row, dict):
                        yield row
                pending.clear()


class VictoriaLogsBook(StoreBook):
    """The followed output of one workload, read from VictoriaLogs (see the module docstring)."""

    kind = KIND

    def __init__(self, workload: str, job_id: str, clock: clock_mod.Clock, client: Client) -> None:
        super().__init__(workload, job_id, clock)
        self.client = client
        self._config = client.config
        self._buffer: collections.deque[Row | int] = collections.deque()
        self._seen: dict[tuple[int, str], None] = {}
        self._swept = 0
        """Wall time (ns) when the last complete sweep began: everything searchable then was read."""
        self._tasks: list[asyncio.Task[None]] = []
        self._closing: list[asyncio.Task[None]] = []
        self._wake = asyncio.Event()
        self.rounds = 0
        """Completed sweeps (tests wait on it instead of on time)."""
        self.late_dropped = 0
        self.overflowed = 0
        """Rows dropped because more than ``max_buffer`` waited to be read (not yet said in a marker)."""

    # -- following -----------------------------------------------------------------------------

    def _following(self) -> None:
        """The tail and the sweep start with the first stream (rows before an attempt's start wait in
        the buffer until ``place_at_start`` places them)."""
        if not self._tasks:
            self._tasks = [asyncio.ensure_future(self._tail_forever()), asyncio.ensure_future(self._sweep_forever())]
            for t, name in zip(self._tasks, ("tail", "sweep"), strict=True):
                t.set_name(f"victorialogs-{name}:{self.workload}")

    def close(self) -> None:
        for t in self._tasks:
            t.cancel()
        self._closing, self._tasks = self._tasks, []

    async def wait_closed(self) -> None:
        """After ``close``: until the tail and sweep tasks have ended."""
        await asyncio.gather(*self._closing, return_exceptions=True)
        self._closing = []

    def _job_filter(self) -> str:
        return f"{self._config.job_field}:={quote(self.job_id)}"

    async def _tail_forever(self) -> None:
        delay = self._config.refresh_s
        while True:
            try:
                async with self.client.tail(self._job_filter()) as rows:
                    self._wake.set()  # a fresh tail: sweep at once, for what came before it
                    delay = self._config.refresh_s
                    async for raw in rows:
                        self._accept(raw)
                raise Unavailable("the tail ended")
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.client.failed(exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._config.max_backoff_s)

    async def _sweep_forever(self) -> None:
        delay = self._config.sweep_s
        while True:
            try:
                await self.sweep()
                delay = self._config.sweep_s
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.client.failed(exc)
                delay = min(max(delay, self._config.refresh_s) * 2, self._config.max_backoff_s)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=delay)

    async def sweep(self) -> None:
        """Query every row of the job from the window's start on, page by page (the catch-up)."""
        began = time.time_ns()
        window = int(self._config.window_s * NS)
        floor = min((s.floor for s in self.files), default=0)
        start = max(floor, self._swept - window)
        while True:
            q = (f"{self._job_filter()} _time:>={format_time(start)} | sort by (_time) "
                 f"| limit {self._config.page}")
            rows = await self.client.query(q)
            newest = start
            for raw in rows:
                row = self._accept(raw)
                if row is not None:
                    newest = max(newest, row.ns)
            if len(rows) < self._config.page or newest <= start:
                break
            start = newest
        self._swept = max(self._swept, began)
        horizon = self._swept - window
        self._seen = {k: None for k in self._seen if k[0] >= horizon}
        self.rounds += 1

    def _accept(self, raw: dict[str, Any]) -> Row | None:
        """One row from the tail or a sweep: buffered unless read already (or before our floor)."""
        dropped = raw.get("_trainguard_dropped")
        if isinstance(dropped, int):
            self._buffer.append(dropped)
            return None
        try:
            row = Row(parse_time(str(raw["_time"])), str(raw.get("_stream_id", raw.get("_stream", ""))),
                      str(raw.get("_msg", "")), str(raw.get(self._config.host_field, "") or ""),
                      str(raw.get(self._config.path_field, "") or ""), _rank(raw.get(self._config.rank_field)))
        except (KeyError, ValueError, OverflowError):
            return None
        key = row.key
        if key in self._seen:
            return row
        if row.ns < self._swept - int(self._config.window_s * NS):  # no sweep reads so far back again
            self.late_dropped += 1
            if self.late_dropped in (1, 100, 10_000):
                logger.warning("%s: %d rows arrived more than %.0f s after newer ones and were not read",
                               self.workload, self.late_dropped, self._config.window_s)
            return row
        self._seen[key] = None
        if len(self._buffer) >= self._config.max_buffer:
            self._buffer.popleft()
            self.overflowed += 1  # said in a marker line at the next read
        self._buffer.append(row)
        return row

    # -- reading -------------------------------------------------------------------------------

    async def read(self) -> list[tuple[Stream, list[signals.LogLine]]]:
        out: Out = {id(s): [] for s in self.files}
        for s in self.files:
            s.lines = {}
        if not self.files:
            self._buffer.clear()
            return []
        now = self._clock.now()
        if self.overflowed:
            self._line(self.files[0], out, f"{MARKER} {self.overflowed} log-store rows dropped: more than "
                       f"{self._config.max_buffer} waited to be read", now=now)
            self.overflowed = 0
        while self._buffer:
            item = self._buffer.popleft()
            if isinstance(item, int):
                s = self.files[0]
                self._line(s, out, f"{MARKER} {item} bytes of log-store rows dropped (too long or not JSON)",
                           now=now)
                continue
            s, own = self._stream_of(item.path)
            ns, digest = item.key
            if self._read_before(s, ns, digest):
                continue
            text = item.message
            if len(text) > self._config.max_line:
                text = f"{text[:self._config.max_line]} {MARKER} {len(text) - self._config.max_line} characters of " \
                       "this line dropped"
            for part in text.split("\n"):
                self._line(s, out, part.rstrip("\r"), node=item.host if not own and item.host else None,
                           key=(ns, digest), now=now, rank=item.rank)
        return [(s, out[id(s)]) for s in self.files]

    # -- attempts ------------------------------------------------------------------------------

    async def observe_ends(self) -> None:
        """No attempt runs: nothing is read (the rows stay buffered until the attempt's start places them)."""

    def _placed_text(self, s: Stream, at: int) -> str:
        return f"{s.path}: rows from {format_time(at)} on (the attempt's start)"


def _rank(value: object) -> int | None:
    """A rank field's value (a small non-negative integer), or None."""
    text = str(value).strip() if value is not None else ""
    return int(text) if text.isdigit() and len(text) <= 7 else None


def books(config: Config) -> tuple[sources.BookFactory, Client]:
    """A book factory for ``engine.Engine(log_books=...)`` and its shared client (close it at the end)."""
    client = Client(config)

    def make(workload: str, job_id: str, clock: clock_mod.Clock, pool: fileio.FilePool | None) -> sources.LogBook:
        del pool
        return VictoriaLogsBook(workload, job_id, clock, client)

    return make, client
