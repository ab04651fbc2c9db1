"""``/api/v1/events``: the live audit stream as Server-Sent Events (``sse.Hub`` fans it out).

Every audit record written from now on, by this process or any other sharing the database
(``workload=ID`` narrows it); a client reconnecting with ``Last-Event-ID`` first gets what it
missed (up to ``sse.BATCH`` records). A comment line every ``KEEPALIVE_S`` keeps proxies from
closing an idle stream; ``event: overflow`` tells a subscriber too slow to keep up that it was dropped.

Place: a route module of ``http.api`` (which mounts it).
"""

from __future__ import annotations

import asyncio
import json
from typing import Final

from aiohttp import web

from trainguard.http import sse
from trainguard.http.common import STATE, ApiError, query
from trainguard.store import audit, queries

KEEPALIVE_S: Final = 15.0


async def events(request: web.Request) -> web.StreamResponse:
    """Server-Sent Events: every audit record written from now on (``workload=ID`` narrows it)."""
    state = request.app[STATE]
    params = query(request, ("workload",))
    workload = params.get("workload")
    state.queries()  # 503 now, not inside the stream, when the store is not open
    resume: int | None = None
    last = request.headers.get("Last-Event-ID")
    if last is not None:
        try:
            resume = int(last)
        except ValueError:
            raise ApiError(400, "Last-Event-ID must be an audit record id") from None
    sub = await state.hub.subscribe()
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store",
                                           "X-Accel-Buffering": "no"})
    try:
        await response.prepare(request)
        await response.write(b": trainguard live audit stream\nretry: 2000\n\n")
        if resume is not None:
            missed = await state.queries().audit(queries.AuditFilter(workload=workload, after_id=resume),
                                                 descending=False, after=None, limit=sse.BATCH)
            seen = 0
            for old in missed[:sse.BATCH]:
                seen = old.id
                await response.write(_event(old))
            sub.skip_through = seen
        skip = sub.skip_through
        while True:
            try:
                record = await asyncio.wait_for(sub.queue.get(), timeout=KEEPALIVE_S)
            except TimeoutError:
                await response.write(b": keep-alive\n\n")
                continue
            if record is None:
                if sub.overflowed:
                    await response.write(b"event: overflow\ndata: {}\n\n")
                break
            if record.id <= skip or (workload is not None and record.workload != workload):
                continue
            await response.write(_event(record))
    except ConnectionResetError:
        pass  # the client went away
    finally:
        state.hub.unsubscribe(sub)
    return response


def _event(record: audit.AuditRecord) -> bytes:
    data = json.dumps(record.to_json(), sort_keys=True, separators=(",", ":"))
    return f"id: {record.id}\nevent: audit\ndata: {data}\n\n".encode()


ROUTES = (
    ("GET", "/events", events),
)
