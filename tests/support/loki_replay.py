"""A local aiohttp server that replays recorded Loki answers (``tests/data/loki/``).

No Loki server may run here (its licence), so the Loki reader is tested against answers in the
exact shape of Loki's documented HTTP API, served over a real socket:

- ``GET /loki/api/v1/query_range``: the next queued answer (a recorded JSON body, or a status
  with a text body, or a hang); an empty ``streams`` answer once the queue is empty;
- ``GET /loki/api/v1/tail``: a WebSocket that sends what the test queues (recorded messages, raw
  text, or a close), and stays open otherwise.

Every request is recorded (path, query parameters, headers) so tests assert what the client asked.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer

DATA = pathlib.Path(__file__).resolve().parent.parent / "data" / "loki"

CLOSE = object()
"""Queue it on the tail: the server closes the WebSocket."""

HANG = object()
"""Queue it on query_range: the server never answers that request (the client times out)."""


def recorded(name: str) -> Any:
    return json.loads((DATA / name).read_text())


@dataclass
class Request:
    path: str
    params: dict[str, str]
    headers: dict[str, str]


@dataclass
class Reply:
    """A non-recorded answer: a status with a plain-text body (Loki's error answers are text)."""

    status: int
    text: str


@dataclass
class LokiReplay:
    ranges: list[Any] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    tail_queues: list[asyncio.Queue[Any]] = field(default_factory=list)
    tail_queries: list[str] = field(default_factory=list)
    refuse_tail: int | None = None
    """Answer the tail handshake with this status instead of upgrading."""
    server: TestServer | None = None
    _hang: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def url(self) -> str:
        assert self.server is not None
        return str(self.server.make_url("")).rstrip("/")

    @property
    def tail_connections(self) -> int:
        return len(self.tail_queues)

    async def send(self, item: Any) -> None:
        """Send on the newest tail WebSocket: a recorded message, raw text, or ``CLOSE``."""
        await self.tail_queues[-1].put(item)

    async def send_to(self, query: str, item: Any) -> None:
        """Send on the newest tail WebSocket opened for ``query``."""
        at = len(self.tail_queries) - 1 - self.tail_queries[::-1].index(query)
        await self.tail_queues[at].put(item)

    def queries(self) -> list[dict[str, str]]:
        return [r.params for r in self.requests if r.path.endswith("/query_range")]

    def tails(self) -> list[dict[str, str]]:
        return [r.params for r in self.requests if r.path.endswith("/tail")]

    def _record(self, request: web.Request) -> None:
        self.requests.append(Request(request.path, dict(request.query), dict(request.headers)))

    async def _query_range(self, request: web.Request) -> web.StreamResponse:
        self._record(request)
        answer = self.ranges.pop(0) if self.ranges else recorded("query_range_empty.json")
        if answer is HANG:
            await self._hang.wait()
        if isinstance(answer, Reply):
            return web.Response(status=answer.status, text=answer.text)
        if isinstance(answer, str):
            return web.Response(text=answer, content_type="application/json")
        return web.json_response(answer)

    async def _tail(self, request: web.Request) -> web.StreamResponse:
        self._record(request)
        if self.refuse_tail is not None:
            return web.Response(status=self.refuse_tail, text="no org id")
        queue: asyncio.Queue[Any] = asyncio.Queue()
        self.tail_queues.append(queue)
        self.tail_queries.append(request.query.get("query", ""))
        ws = web.WebSocketResponse()
        await ws.prepare(request)

        async def read() -> None:
            # Reading answers the client's close frame, as a real server does; then stop sending.
            async for _ in ws:
                pass
            queue.put_nowait(CLOSE)

        reader = asyncio.create_task(read())
        try:
            while (item := await queue.get()) is not CLOSE:
                await ws.send_str(item if isinstance(item, str) else json.dumps(item))
            await ws.close()
        finally:
            reader.cancel()
        return ws

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/loki/api/v1/query_range", self._query_range)
        app.router.add_get("/loki/api/v1/tail", self._tail)
        return app


async def start() -> AsyncIterator[LokiReplay]:
    """The replay server on a free loopback port (use as an async generator fixture)."""
    replay = LokiReplay()
    replay.server = TestServer(replay.app(), host="127.0.0.1")
    await replay.server.start_server()
    try:
        yield replay
    finally:
        replay._hang.set()
        for queue in replay.tail_queues:
            queue.put_nowait(CLOSE)
        await replay.server.close()


async def until(reader: Any, condition: Any, within: float = 30.0) -> None:
    """Wait for ``condition()`` to hold, re-checked at each change of ``reader`` (``LokiReader.changed``)."""
    async with asyncio.timeout(within):
        while not condition():
            reader.changed.clear()
            await reader.changed.wait()
