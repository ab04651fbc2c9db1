"""Grafana Loki's HTTP API as the reader needs it: ``query_range`` pages and the ``tail`` WebSocket.

Place: under ``signals/``, below ``signals.loki`` (the ``LokiReader`` that turns entries into
``signals.LogLine`` objects per workload and keeps the positions). This module only speaks the
wire: authentication headers, the JSON shapes of both endpoints parsed into ``LokiEntry`` values,
and paging through one time span without handing an entry out twice (``LokiClient.pages``).
Every failure is a ``LokiError``; retrying is the reader's business.

Loki's query and tail API is documented at https://grafana.com/docs/loki/latest/reference/loki-http-api/
(``query_range``, ``tail``); the tests replay responses of exactly that shape from a local server.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

import aiohttp

from trainguard.signals import linehash

logger = logging.getLogger("trainguard.signals.loki")
"""The reader's logger: the client's warnings (pages too large, lines skipped) stay under the name
operators filter Loki's messages by."""

DEFAULT_PAGE_LIMIT = 1000
"""Entries per ``query_range`` page: well below Loki's default ``max_entries_limit_per_query`` (5000)."""

MAX_PAGE_LIMIT = 5000
"""Loki's default ``max_entries_limit_per_query``: a page is never asked to be larger."""

SEEN_HASH_CHARS = 8
"""Hex characters of one line hash in a stored position (32 bits: lines that share a stream and a
nanosecond are few, so a collision among them is negligible)."""

MAX_BODY = 64 * 1024 * 1024
"""Bytes of one answer or tail message read at most: a page of long lines is asked again smaller."""


class LokiError(Exception):
    """A request to Loki failed; ``status`` is the HTTP status (None: no answer, or unreadable)."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class AnswerTooLarge(LokiError):
    """An answer longer than ``MAX_BODY``: the page is asked again with a smaller limit."""


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
