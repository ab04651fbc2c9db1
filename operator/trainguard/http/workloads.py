"""``/api/v1/workloads``: the workloads the loop has seen, one workload's attempt timelines, and the
acknowledgement a person leaves on one.

The list is a keyset page over ``store.queries`` (filters by state, policy, effective mode,
scheduler, anomalies, text; sorted by first or last seen or id); the ``mode`` filter is resolved
to the policies whose effective mode matches (``policies.action_policies``). One workload's detail
groups its newest ``TIMELINE_MAX`` audit records by attempt, with the time lost from the first
anomaly to the attempt's end.

Place: a route module of ``http.api`` (which mounts it).
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Mapping
from typing import Any, Final

from aiohttp import web

from trainguard.http import auth, models
from trainguard.http.common import (
    STATE,
    ApiError,
    State,
    answer,
    audit_item,
    bool_of,
    cursor_fingerprint,
    decode_cursor,
    encode_cursor,
    iso,
    limit_of,
    list_of,
    query,
    read_body,
)
from trainguard.http.policies import action_policies, mode_of
from trainguard.model import times, vocab
from trainguard.store import audit, queries

TIMELINE_MAX: Final = 2000
"""Audit records shown in one workload's timeline (the newest); older ones are paged via /audit."""


def workload_item(state: State, row: queries.WorkloadRow) -> models.WorkloadItem:
    w = row.workload
    return models.WorkloadItem(
        workload=w.id, state=w.state, attempt=row.attempt, policy=w.policy, mode=mode_of(state, w.id, w.policy),
        scheduler=w.scheduler, job_id=w.job_id, first_seen=iso(w.first_seen) or "", last_seen=iso(w.last_seen) or "",
        anomalies=row.anomalies, opt_in_errors=list(w.opt_in_errors),
    )


WORKLOAD_PARAMS: Final = ("state", "policy", "mode", "scheduler", "cluster", "has_anomaly", "q", "sort", "limit",
                          "cursor")


async def list_workloads(request: web.Request) -> web.Response:
    state = request.app[STATE]
    params = query(request, WORKLOAD_PARAMS)
    limit = limit_of(params)
    sort = params.get("sort", "-last_seen")
    if sort not in queries.WORKLOAD_SORTS:
        raise ApiError(400, f"unknown sort {sort[:40]!r}; allowed: {', '.join(queries.WORKLOAD_SORTS)}")
    modes = list_of(params, "mode", ("monitor", "action"))
    policies = list_of(params, "policy")
    policies_not: list[str] | None = None
    if modes and len(set(modes)) == 1:
        acting = action_policies(state)
        if acting is None:
            raise ApiError(409, "the mode filter needs the engine's policies, and no engine runs in this process")
        if modes[0] == "action":
            policies = [p for p in policies if p in acting] if policies else acting
            if not policies:
                return answer(models.WorkloadPage(items=[], next=None))
        else:
            policies_not = acting
    q = params.get("q")
    if q is not None and len(q) > 200:
        raise ApiError(400, "q is longer than 200 characters")
    scheduler = params.get("scheduler") or params.get("cluster")
    flt = queries.WorkloadFilter(states=list_of(params, "state"), policies=policies, policies_not=policies_not,
                                 scheduler=scheduler, has_anomaly=bool_of(params, "has_anomaly"), text=q or None)
    fingerprint = cursor_fingerprint(params)
    key = decode_cursor(params.get("cursor"), "workloads", fingerprint)
    after: tuple[Any, str] | None = None
    column = sort.lstrip("-")
    if key is not None:
        if len(key) != 2 or not isinstance(key[1], str):
            raise ApiError(400, "malformed cursor: pass the 'next' value of the previous page unchanged")
        value: Any = key[0]
        if column != "id":
            if not isinstance(value, (int, float)):
                raise ApiError(400, "malformed cursor: pass the 'next' value of the previous page unchanged")
            value = times.to_datetime(float(value))
        after = (value, key[1])
    rows = await state.queries().workloads(flt, sort=sort, after=after, limit=limit)
    nxt = None
    if len(rows) > limit:
        rows = rows[:limit]
        last = rows[-1].workload
        sort_value: Any = last.id if column == "id" else (last.last_seen if column == "last_seen" else last.first_seen)
        nxt = encode_cursor("workloads", fingerprint, [sort_value, last.id])
    return answer(models.WorkloadPage(items=[workload_item(state, r) for r in rows], next=nxt))


def _summary(record: audit.AuditRecord) -> str:
    p = record.payload
    match record.kind:
        case vocab.AuditKind.ANOMALY:
            return f"{p.get('symptom')} {p.get('category')}"
        case vocab.AuditKind.VERDICT:
            return f"{p.get('attribution')} {p.get('category')} nodes={p.get('nodes') or []}"
        case vocab.AuditKind.ADVICE:
            return f"{p.get('action')} ({p.get('mode')}): {'; '.join(str(r) for r in p.get('reasons') or [])}"
        case vocab.AuditKind.ACTION:
            return f"{p.get('operation')} {p.get('status', '')}".strip()
        case vocab.AuditKind.OUTCOME:
            return f"{p.get('disposition')}: {p.get('detail')}"
        case vocab.AuditKind.WATCHDOG:
            return str(p.get("reason", "watchdog"))
    return record.kind.value


def _evidence(payload: Mapping[str, Any]) -> list[models.Evidence]:
    out = []
    for item in payload.get("evidence") or []:
        if isinstance(item, dict):
            line = item.get("line")
            out.append(models.Evidence(line=line if isinstance(line, int) else None, text=str(item.get("text", "")),
                                       pattern=str(item.get("pattern", ""))))
    return out


def _strs(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _ints(value: Any) -> list[int]:
    return [v for v in value if isinstance(v, int)] if isinstance(value, list) else []


async def get_workload(request: web.Request) -> web.Response:
    state = request.app[STATE]
    query(request, ())
    workload = request.match_info["id"]
    q = state.queries()
    row = await q.workload(workload)
    if row is None:
        raise ApiError(404, f"no workload {workload[:200]!r} in the audit store")
    records = await q.audit(queries.AuditFilter(workload=workload), descending=True, after=None,
                            limit=TIMELINE_MAX)
    truncated = len(records) > TIMELINE_MAX
    records = list(reversed(records[:TIMELINE_MAX]))
    by_attempt: dict[int, list[audit.AuditRecord]] = {}
    for record in records:
        by_attempt.setdefault(record.attempt or 0, []).append(record)
    attempts = {a.attempt: a for a in await q.attempts(workload)}
    now = time.time()
    views = []
    for number in sorted(set(attempts) | set(by_attempt)):
        stored = attempts.get(number)
        steps: list[models.TimelineStep] = []
        previous: datetime.datetime | None = None
        first_anomaly: datetime.datetime | None = None
        for record in by_attempt.get(number, []):
            p = record.payload
            if record.kind is vocab.AuditKind.ANOMALY and first_anomaly is None:
                first_anomaly = record.time
            steps.append(models.TimelineStep(
                id=record.id, time=audit.iso_utc(record.time), kind=record.kind.value, decided_by=record.decided_by,
                summary=_summary(record),
                since_previous_s=None if previous is None else (record.time - previous).total_seconds(),
                evidence=_evidence(p), suspect_nodes=_strs(p.get("suspect_nodes", p.get("nodes"))),
                suspect_ranks=_ints(p.get("suspect_ranks")), payload=dict(p),
            ))
            previous = record.time
        ended = stored.ended_at if stored is not None else None
        lost = None
        if first_anomaly is not None:
            lost = max(0.0, (ended.timestamp() if ended is not None else now) - first_anomaly.timestamp())
        views.append(models.AttemptView(
            attempt=number, state=stored.state if stored else "",
            started_at=audit.iso_utc(stored.started_at) if stored and stored.started_at else None,
            ended_at=audit.iso_utc(ended) if ended is not None else None,
            nodes=stored.nodes if stored else [], checkpoint_saved=bool(stored and stored.checkpoint_saved),
            timeline=steps, time_lost_s=lost,
        ))
    return answer(models.WorkloadDetail(workload=workload_item(state, row), comment=row.workload.comment,
                                       attempts=views, timeline_truncated=truncated))


async def acknowledge(request: web.Request) -> web.Response:
    state = request.app[STATE]
    query(request, ())
    workload = request.match_info["id"]
    body: models.Acknowledge = await read_body(request, models.Acknowledge)
    row = await state.queries().workload(workload)
    if row is None:
        raise ApiError(404, f"no workload {workload[:200]!r} in the audit store")
    who = auth.principal_of(request)
    record = await state.store().record_api_action(
        workload=workload, attempt=row.attempt, by=who.user, at=time.time(),
        payload={"operation": "acknowledge", "status": "done", "arguments": {"note": body.note}})
    return answer(models.MutationResult(ok=True, message=f"{workload} acknowledged", audit=audit_item(record)))


ROUTES = (
    ("GET", "/workloads", list_workloads),
    ("POST", "/workloads/{id:.+}/acknowledge", acknowledge),
    ("GET", "/workloads/{id:.+}", get_workload),
)
