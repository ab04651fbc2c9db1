"""Live audit records for the console: a small in-process fan-out fed by the audit database.

Place: ``/api/v1/events`` (``http/events.py``) streams what ``Hub`` publishes as Server-Sent Events.
The hub reads new ``audit_log`` rows (id greater than the last one it saw) every ``interval``
seconds while anyone listens, so it sees records written by this process's engine and by any other
process sharing the database (a second replica, a ``trainguard run`` beside an operator) alike, and
the engine stays unaware of HTTP. One query per interval serves every subscriber.

Each event is ``id: <audit id>``, ``event: audit``, ``data: <the record as trainguard audit --format json
prints it>``. A client that reconnects with ``Last-Event-ID`` gets what it missed (up to a cap),
then the live stream. A slow subscriber's queue is bounded: when it overflows, the subscriber is
told (``event: overflow``) and dropped, never the hub.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Final

from trainguard.store import audit

logger = logging.getLogger("trainguard.http.sse")

QUEUE_MAX: Final = 1000
BATCH: Final = 500

Fetch = Callable[[int, int], Awaitable[list[audit.AuditRecord]]]
"""(after id, limit) -> audit records with a larger id, oldest first."""


class Subscriber:
    def __init__(self) -> None:
        self.queue: asyncio.Queue[audit.AuditRecord | None] = asyncio.Queue(QUEUE_MAX)
        self.overflowed = False
        self.skip_through = 0
        """Records up to this id were already sent (a reconnect's catch-up)."""


class Hub:
    """Polls the audit stream while it has subscribers and fans each new record out to all of them."""

    def __init__(self, fetch: Fetch, last_id: Callable[[], Awaitable[int]], *, interval: float = 0.2) -> None:
        self._fetch = fetch
        self._last_id = last_id
        self.interval = interval
        self._subscribers: set[Subscriber] = set()
        self._task: asyncio.Task[None] | None = None
        self._cursor: int | None = None

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    async def subscribe(self) -> Subscriber:
        """A new subscriber; records written after this call reach it."""
        if self._cursor is None or self._task is None or self._task.done():
            self._cursor = await self._last_id()
        sub = Subscriber()
        self._subscribers.add(sub)
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._poll())
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        self._subscribers.discard(sub)

    def publish(self, record: audit.AuditRecord) -> None:
        for sub in list(self._subscribers):
            try:
                sub.queue.put_nowait(record)
            except asyncio.QueueFull:
                sub.overflowed = True
                self._subscribers.discard(sub)
                with contextlib.suppress(asyncio.QueueEmpty):
                    sub.queue.get_nowait()
                sub.queue.put_nowait(None)

    async def poll_once(self) -> int:
        """Read and publish what was written since the last poll; how many records."""
        assert self._cursor is not None
        records = await self._fetch(self._cursor, BATCH)
        for record in records:
            self._cursor = max(self._cursor, record.id)
            self.publish(record)
        return len(records)

    async def _poll(self) -> None:
        failing = False
        while self._subscribers:
            try:
                more = await self.poll_once()
                failing = False
            except Exception as exc:  # the store is away: the stream waits, the subscribers stay
                if not failing:
                    logger.warning("live audit stream cannot read the store (retrying): %s", exc)
                failing, more = True, 0
            if more < BATCH:
                await asyncio.sleep(self.interval)

    async def close(self) -> None:
        for sub in list(self._subscribers):
            self._subscribers.discard(sub)
            with contextlib.suppress(asyncio.QueueFull):
                sub.queue.put_nowait(None)
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
