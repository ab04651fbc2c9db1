"""``/api/v1/audit``: search the audit log by workload, attempt, kind, producer and time, a keyset page
at a time (``store.queries``: never a whole table), oldest or newest first.

Place: a route module of ``http.api`` (which mounts it).
"""

from __future__ import annotations

from typing import Final

from aiohttp import web

from trainguard.http import models
from trainguard.http.common import (
    STATE,
    ApiError,
    answer,
    audit_item,
    cursor_fingerprint,
    decode_cursor,
    encode_cursor,
    int_of,
    limit_of,
    list_of,
    query,
    time_of,
)
from trainguard.model import vocab
from trainguard.store import queries

PRODUCERS: Final = {"policy": vocab.Decider.POLICY_ENGINE.value, "watchdog": vocab.Decider.WATCHDOG.value,
                    "detector": "detector", "api": "api", "operator": vocab.Decider.OPERATOR.value}
"""``producer`` filter values -> the ``decided_by`` they select."""
AUDIT_PARAMS: Final = ("workload", "attempt", "kind", "producer", "since", "until", "order", "limit", "cursor")


async def search_audit(request: web.Request) -> web.Response:
    state = request.app[STATE]
    params = query(request, AUDIT_PARAMS)
    limit = limit_of(params)
    order = params.get("order", "desc")
    if order not in ("asc", "desc"):
        raise ApiError(400, f"order must be asc or desc, got {order[:40]!r}")
    since, until = time_of(params, "since"), time_of(params, "until")
    if since is not None and until is not None and until <= since:
        raise ApiError(400, "until must be after since")
    kinds = [vocab.AuditKind(k) for k in list_of(params, "kind", [k.value for k in vocab.AuditKind])]
    producers = list_of(params, "producer", list(PRODUCERS))
    flt = queries.AuditFilter(workload=params.get("workload"), attempt=int_of(params, "attempt"), kinds=kinds,
                              deciders=[PRODUCERS[p] for p in producers], since=since, until=until)
    fingerprint = cursor_fingerprint(params)
    key = decode_cursor(params.get("cursor"), "audit", fingerprint)
    after = None
    if key is not None:
        if len(key) != 1 or not isinstance(key[0], int) or isinstance(key[0], bool):
            raise ApiError(400, "malformed cursor: pass the 'next' value of the previous page unchanged")
        after = key[0]
    records = await state.queries().audit(flt, descending=order == "desc", after=after, limit=limit)
    nxt = None
    if len(records) > limit:
        records = records[:limit]
        nxt = encode_cursor("audit", fingerprint, [records[-1].id])
    return answer(models.AuditPage(items=[audit_item(r) for r in records], next=nxt))


ROUTES = (
    ("GET", "/audit", search_audit),
)
