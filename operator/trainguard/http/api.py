"""``/api/v1``: what the loop sees, for the console and for scripts (docs/api.md).

Place: mounted on the ``trainguard.http.app`` application by the shells (``trainguard run``,
``trainguard operator``) through ``install``. It reads the audit database through
``store.queries`` (keyset pages, never whole tables), the engine's in-memory view (policies,
effective modes, tracked workloads) through a ``Backend``, and the process's ``health.Health``.
The engine knows nothing about HTTP: a mode switch goes through ``Engine.update_policies``, an undo
through the undrainer of the act layer, like any other caller.

Bad input is a 400 with one sentence (``models.Error``), never a 500: unknown query parameters,
malformed or foreign cursors, page sizes above ``MAX_LIMIT``, bad times or ranges. Answers are
built from ``http/models.py``, the same models the OpenAPI document is generated from.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import datetime
import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from aiohttp import web
from pydantic import BaseModel, ValidationError

from trainguard import health as health_mod
from trainguard.act import undrain
from trainguard.http import app as http_app
from trainguard.http import auth, login, models, openapi, sse
from trainguard.http import breaker as breaker_routes
from trainguard.http import pause as pause_routes
from trainguard.model import actions, vocab
from trainguard.observe import goodput
from trainguard.store import audit, queries
from trainguard.store import goodput as goodput_facts

if TYPE_CHECKING:
    from trainguard import engine as engine_mod

logger = logging.getLogger("trainguard.http.api")

PREFIX: Final = "/api/v1"
DEFAULT_LIMIT: Final = 50
MAX_LIMIT: Final = 500
TIMELINE_MAX: Final = 2000
"""Audit records shown in one workload's timeline (the newest); older ones are paged via /audit."""
NODE_WINDOW_S: Final = 30 * 86400.0
KEEPALIVE_S: Final = 15.0
PRODUCERS: Final = {"policy": vocab.Decider.POLICY_ENGINE.value, "watchdog": vocab.Decider.WATCHDOG.value,
                    "detector": "detector", "api": "api", "operator": vocab.Decider.OPERATOR.value}
"""``producer`` filter values -> the ``decided_by`` they select."""


class Backend(Protocol):
    """What the API reads from its shell: the open store and the running engine (either may be None:
    the store before start-up finished, the engine on a replica without the Lease)."""

    @property
    def store(self) -> audit.AuditStore | None: ...

    @property
    def engine(self) -> engine_mod.Engine | None: ...


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class State:
    """The API's own state on the application: backend, health, live hub, mode switches."""

    def __init__(self, backend: Backend, health: health_mod.Health, *, allow_action: bool,
                 policies_editable: bool, poll_interval: float = 0.2) -> None:
        self.backend = backend
        self.health = health
        self.allow_action = allow_action
        self.policies_editable = policies_editable
        """Standalone: a mode switch changes the running policy set. In the operator the RecoveryPolicy
        object is the source of truth, so the API refuses (edit the object instead)."""
        self.switched_by: dict[str, str] = {}
        self._queries: tuple[audit.AuditStore, queries.ReadQueries] | None = None
        self.hub = sse.Hub(self._fetch_after, self._last_id, interval=poll_interval)

    def store(self) -> audit.AuditStore:
        store = self.backend.store
        if store is None:
            raise ApiError(503, "the audit store is not open yet (starting up)")
        return store

    def queries(self) -> queries.ReadQueries:
        store = self.store()
        if self._queries is None or self._queries[0] is not store:
            self._queries = (store, queries.ReadQueries(store.sql_engine))
        return self._queries[1]

    async def _fetch_after(self, after: int, limit: int) -> list[audit.AuditRecord]:
        return await self.queries().audit(queries.AuditFilter(after_id=after), descending=False, after=None,
                                          limit=limit - 1)

    async def _last_id(self) -> int:
        return await self.queries().last_audit_id()


STATE: Final = web.AppKey("api_state", State)


# ---------------------------------------------------------------- helpers


def _json(model: BaseModel, status: int = 200) -> web.Response:
    return web.Response(text=model.model_dump_json(), status=status, content_type="application/json")


def _iso(epoch: float | None) -> str | None:
    return None if epoch is None else audit.iso_utc(audit.to_datetime(epoch))


def _params(request: web.Request, allowed: Sequence[str]) -> dict[str, str]:
    unknown = sorted(set(request.query) - set(allowed))
    if unknown:
        raise ApiError(400, f"unknown query parameter(s) {', '.join(unknown)}; allowed: {', '.join(allowed)}")
    out: dict[str, str] = {}
    for key in request.query:
        values = request.query.getall(key)
        if len(values) > 1:
            raise ApiError(400, f"query parameter {key} given {len(values)} times; give it once "
                                "(comma-separated values where a list is allowed)")
        out[key] = values[0]
    return out


def _limit(params: Mapping[str, str]) -> int:
    text = params.get("limit")
    if text is None:
        return DEFAULT_LIMIT
    try:
        value = int(text)
    except ValueError:
        raise ApiError(400, f"limit must be an integer, got {text[:40]!r}") from None
    if not 1 <= value <= MAX_LIMIT:
        raise ApiError(400, f"limit must be between 1 and {MAX_LIMIT}, got {value}")
    return value


def _list(params: Mapping[str, str], key: str, allowed: Sequence[str] | None = None) -> list[str]:
    text = params.get(key)
    if text is None:
        return []
    values = [v.strip() for v in text.split(",") if v.strip()]
    if not values:
        raise ApiError(400, f"{key} is empty")
    if allowed is not None:
        bad = [v for v in values if v not in allowed]
        if bad:
            raise ApiError(400, f"unknown {key} {', '.join(repr(b[:40]) for b in bad)}; allowed: {', '.join(allowed)}")
    return values


def _bool(params: Mapping[str, str], key: str) -> bool | None:
    text = params.get(key)
    if text is None:
        return None
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise ApiError(400, f"{key} must be true or false, got {text[:40]!r}")


def _time(params: Mapping[str, str], key: str) -> datetime.datetime | None:
    text = params.get(key)
    if text is None:
        return None
    try:
        when = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ApiError(400, f"{key} must be an ISO 8601 time such as 2026-11-29T16:00:00Z, got {text[:60]!r}") \
            from None
    return when if when.tzinfo is not None else when.replace(tzinfo=datetime.UTC)


def _int(params: Mapping[str, str], key: str) -> int | None:
    text = params.get(key)
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        raise ApiError(400, f"{key} must be an integer, got {text[:40]!r}") from None
    if value < 0:
        raise ApiError(400, f"{key} must not be negative")
    return value


def _fingerprint(params: Mapping[str, str]) -> str:
    """What a cursor is bound to: the filters and the sort (not the page size, not the cursor)."""
    relevant = {k: v for k, v in sorted(params.items()) if k not in ("cursor", "limit")}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:16]


def encode_cursor(kind: str, fingerprint: str, key: list[Any]) -> str:
    raw = json.dumps({"v": 1, "t": kind, "f": fingerprint, "k": key}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(text: str | None, kind: str, fingerprint: str) -> list[Any] | None:
    """The key inside a cursor of ours; 400 for anything else (garbage, another list's, other filters)."""
    if text is None:
        return None
    try:
        data = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise ApiError(400, "malformed cursor: pass the 'next' value of the previous page unchanged") from None
    if not isinstance(data, dict) or data.get("v") != 1 or data.get("t") != kind or not isinstance(data.get("k"), list):
        raise ApiError(400, "malformed cursor: pass the 'next' value of the previous page unchanged")
    if data.get("f") != fingerprint:
        raise ApiError(400, "cursor belongs to other filters or another sort order: start again without a cursor")
    key: list[Any] = data["k"]
    return key


def audit_item(record: audit.AuditRecord) -> models.AuditItem:
    return models.AuditItem.model_validate(record.to_json())


# ---------------------------------------------------------------- modes


def _action_policies(state: State) -> list[str] | None:
    """Names of the policies whose effective mode is Action; None when no engine runs here."""
    engine = state.backend.engine
    if engine is None:
        return None
    if not state.allow_action:
        return []
    return [p.name for p in engine.policies.policies if p.spec.mode == vocab.Mode.ACTION]


def _mode_of(state: State, workload: str, policy: str) -> models.ModeName:
    engine = state.backend.engine
    if engine is None:
        return "unknown"
    runtime = engine.runtimes.get(workload)
    if runtime is not None and runtime.spec is not None:
        return "action" if runtime.spec.mode == vocab.Mode.ACTION else "monitor"
    found = engine.policies.get(policy) if policy else None
    if found is None:
        return "unknown"
    return "action" if state.allow_action and found.spec.mode == vocab.Mode.ACTION else "monitor"


def _workload_item(state: State, row: queries.WorkloadRow) -> models.WorkloadItem:
    w = row.workload
    return models.WorkloadItem(
        workload=w.id, state=w.state, attempt=row.attempt, policy=w.policy, mode=_mode_of(state, w.id, w.policy),
        scheduler=w.scheduler, job_id=w.job_id, first_seen=_iso(w.first_seen) or "", last_seen=_iso(w.last_seen) or "",
        anomalies=row.anomalies, opt_in_errors=list(w.opt_in_errors),
    )


# ---------------------------------------------------------------- workloads

WORKLOAD_PARAMS: Final = ("state", "policy", "mode", "scheduler", "cluster", "has_anomaly", "q", "sort", "limit",
                          "cursor")


async def list_workloads(request: web.Request) -> web.Response:
    state = request.app[STATE]
    params = _params(request, WORKLOAD_PARAMS)
    limit = _limit(params)
    sort = params.get("sort", "-last_seen")
    if sort not in queries.WORKLOAD_SORTS:
        raise ApiError(400, f"unknown sort {sort[:40]!r}; allowed: {', '.join(queries.WORKLOAD_SORTS)}")
    modes = _list(params, "mode", ("monitor", "action"))
    policies = _list(params, "policy")
    policies_not: list[str] | None = None
    if modes and len(set(modes)) == 1:
        acting = _action_policies(state)
        if acting is None:
            raise ApiError(409, "the mode filter needs the engine's policies, and no engine runs in this process")
        if modes[0] == "action":
            policies = [p for p in policies if p in acting] if policies else acting
            if not policies:
                return _json(models.WorkloadPage(items=[], next=None))
        else:
            policies_not = acting
    q = params.get("q")
    if q is not None and len(q) > 200:
        raise ApiError(400, "q is longer than 200 characters")
    scheduler = params.get("scheduler") or params.get("cluster")
    flt = queries.WorkloadFilter(states=_list(params, "state"), policies=policies, policies_not=policies_not,
                                 scheduler=scheduler, has_anomaly=_bool(params, "has_anomaly"), text=q or None)
    fingerprint = _fingerprint(params)
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
            value = datetime.datetime.fromtimestamp(float(value), datetime.UTC)
        after = (value, key[1])
    rows = await state.queries().workloads(flt, sort=sort, after=after, limit=limit)
    nxt = None
    if len(rows) > limit:
        rows = rows[:limit]
        last = rows[-1].workload
        sort_value: Any = last.id if column == "id" else (last.last_seen if column == "last_seen" else last.first_seen)
        nxt = encode_cursor("workloads", fingerprint, [sort_value, last.id])
    return _json(models.WorkloadPage(items=[_workload_item(state, r) for r in rows], next=nxt))


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
    _params(request, ())
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
    return _json(models.WorkloadDetail(workload=_workload_item(state, row), comment=row.workload.comment,
                                       attempts=views, timeline_truncated=truncated))


# ---------------------------------------------------------------- audit

AUDIT_PARAMS: Final = ("workload", "attempt", "kind", "producer", "since", "until", "order", "limit", "cursor")


async def search_audit(request: web.Request) -> web.Response:
    state = request.app[STATE]
    params = _params(request, AUDIT_PARAMS)
    limit = _limit(params)
    order = params.get("order", "desc")
    if order not in ("asc", "desc"):
        raise ApiError(400, f"order must be asc or desc, got {order[:40]!r}")
    since, until = _time(params, "since"), _time(params, "until")
    if since is not None and until is not None and until <= since:
        raise ApiError(400, "until must be after since")
    kinds = [vocab.AuditKind(k) for k in _list(params, "kind", [k.value for k in vocab.AuditKind])]
    producers = _list(params, "producer", list(PRODUCERS))
    flt = queries.AuditFilter(workload=params.get("workload"), attempt=_int(params, "attempt"), kinds=kinds,
                              deciders=[PRODUCERS[p] for p in producers], since=since, until=until)
    fingerprint = _fingerprint(params)
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
    return _json(models.AuditPage(items=[audit_item(r) for r in records], next=nxt))


# ---------------------------------------------------------------- policies


async def list_policies(request: web.Request) -> web.Response:
    state = request.app[STATE]
    _params(request, ())
    engine = state.backend.engine
    if engine is None:
        raise ApiError(503, "no engine runs in this process (a standby replica, or starting up)")
    covered = await state.queries().covered()
    items = []
    for policy in engine.policies.policies:
        declared = policy.spec.mode
        acting = state.allow_action and declared == vocab.Mode.ACTION
        items.append(models.PolicyItem(
            name=policy.name, declared_mode="Action" if declared == vocab.Mode.ACTION else "Monitor",
            mode="action" if acting else "monitor", mode_switched_by=state.switched_by.get(policy.name),
            covered_workloads=covered.get(policy.name, 0),
            status="acting" if acting else ("monitoring: the cluster-wide Action switch is off"
                                            if declared == vocab.Mode.ACTION else "monitoring"),
            spec=policy.spec.model_dump(mode="json", by_alias=True),
        ))
    return _json(models.PolicyList(items=items, action_switch=state.allow_action))


async def _body(request: web.Request, model: type[BaseModel]) -> Any:
    try:
        data = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ApiError(400, "the body must be a JSON object") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "body"
        raise ApiError(400, f"invalid body: {where}: {first.get('msg')}") from None


async def set_policy_mode(request: web.Request) -> web.Response:
    state = request.app[STATE]
    _params(request, ())
    name = request.match_info["name"]
    change: models.ModeChange = await _body(request, models.ModeChange)
    if not state.policies_editable:
        raise ApiError(409, f"in the operator the RecoveryPolicy object decides the mode: kubectl patch the "
                            f"RecoveryPolicy behind {name!r} (spec.mode)")
    engine = state.backend.engine
    if engine is None:
        raise ApiError(503, "no engine runs in this process")
    policy = engine.policies.get(name)
    if policy is None or policy.name != name:
        raise ApiError(404, f"no policy {name[:200]!r}")
    mode = vocab.Mode.ACTION if change.mode.lower() == "action" else vocab.Mode.MONITOR
    who = auth.principal_of(request)
    before = policy.spec.mode
    updated = policy.model_copy(update={"spec": policy.spec.model_copy(update={"mode": mode})})
    engine.update_policies(dataclasses.replace(
        engine.policies, policies=tuple(updated if p is policy else p for p in engine.policies.policies)))
    state.switched_by[name] = who.user
    note = "" if mode != vocab.Mode.ACTION or state.allow_action else \
        " (the cluster-wide Action switch is off: the effective mode stays Monitor)"
    record = await state.store().record_api_action(
        workload=f"policy:{name}", attempt=None, by=who.user, at=time.time(),
        payload={"operation": "set_policy_mode", "status": "done",
                 "arguments": {"policy": name, "from": before.value, "to": mode.value}})
    logger.warning("policy %s switched from %s to %s by %s through the API%s", name, before.value, mode.value,
                   who.user, note)
    return _json(models.MutationResult(ok=True, message=f"policy {name} is now {mode.value}{note}",
                                       audit=audit_item(record)))


async def acknowledge(request: web.Request) -> web.Response:
    state = request.app[STATE]
    _params(request, ())
    workload = request.match_info["id"]
    body: models.Acknowledge = await _body(request, models.Acknowledge)
    row = await state.queries().workload(workload)
    if row is None:
        raise ApiError(404, f"no workload {workload[:200]!r} in the audit store")
    who = auth.principal_of(request)
    record = await state.store().record_api_action(
        workload=workload, attempt=row.attempt, by=who.user, at=time.time(),
        payload={"operation": "acknowledge", "status": "done", "arguments": {"note": body.note}})
    return _json(models.MutationResult(ok=True, message=f"{workload} acknowledged", audit=audit_item(record)))


# ---------------------------------------------------------------- nodes

_NODE_OPS: Final = (actions.Operation.DRAIN_NODE.value, actions.Operation.RESUME_NODE.value,
                     actions.Operation.EXCLUDE_NODES.value)
"""Rows that take a node out of service or put it back (``act.undrain.nodes_out``: on Kubernetes an
exclusion is a cordon plus taint of the node for everyone, undone like a drain)."""


async def list_nodes(request: web.Request) -> web.Response:
    state = request.app[STATE]
    params = _params(request, ("since",))
    since = _time(params, "since") or audit.to_datetime(time.time() - NODE_WINDOW_S)
    store = state.store()
    nodes: dict[str, models.NodeItem] = {}

    def item(name: str) -> models.NodeItem:
        return nodes.setdefault(name, models.NodeItem(node=name, incidents=[], actions=[]))

    for hit in await store.node_history(since=since.timestamp()):
        item(hit.node).incidents.append(models.NodeIncident(workload=hit.workload, attempt=hit.attempt,
                                                            category=hit.category, at=_iso(hit.at) or ""))
    rows = await state.queries().node_actions(_NODE_OPS, since=since)
    resumed = {(r.workload, r.attempt, r.generation, str(r.args.get("node", ""))) for r in rows
               if r.operation == actions.Operation.RESUME_NODE.value and r.status == actions.ActionStatus.DONE.value}
    latest_drain: dict[str, int] = {}
    for r in rows:
        if r.status == actions.ActionStatus.DONE.value:
            for node in undrain.nodes_out(r.operation, r.args):
                latest_drain[node] = r.id
    for r in rows:
        names = undrain.nodes_out(r.operation, r.args) if r.operation != actions.Operation.RESUME_NODE.value \
            else [str(r.args.get("node", ""))]
        for node in (n for n in names if n):
            undoable = (latest_drain.get(node) == r.id
                        and (r.workload, r.attempt, r.generation, node) not in resumed)
            item(node).actions.append(models.NodeAction(
                workload=r.workload, attempt=r.attempt, generation=r.generation, step=r.step,
                operation=r.operation, status=r.status, at=audit.iso_utc(r.updated_at), error=r.error,
                undoable=undoable))
    return _json(models.NodeList(items=[nodes[n] for n in sorted(nodes)], since=audit.iso_utc(since)))


async def undo_drain(request: web.Request) -> web.Response:
    state = request.app[STATE]
    _params(request, ())
    node = request.match_info["node"]
    if request.body_exists:
        await _body(request, models.Acknowledge)
    engine = state.backend.engine
    if engine is None:
        raise ApiError(503, "no engine runs in this process (only the leader changes nodes)")
    who = auth.principal_of(request)
    try:
        result = await engine.undrainer.undo(node, by=who.user)
    except undrain.NotOurs as exc:
        raise ApiError(409, str(exc)) from None
    if result.status is not actions.ActionStatus.DONE:
        raise ApiError(502, f"resuming {node} failed: {result.error}")
    message = f"resumed {node} (our drain for {result.workload})"
    record = await state.store().record_api_action(
        workload=result.workload, attempt=result.attempt, by=who.user, at=time.time(),
        payload={"operation": "undo_drain", "status": result.status.value, "arguments": {"node": node}})
    return _json(models.MutationResult(ok=True, message=message, audit=audit_item(record)))


# ---------------------------------------------------------------- goodput


_GOODPUT_FAILURES: Final = 2000
"""Failures listed in one goodput answer (the most recent): enough for the console's plot."""


def _seconds_param(params: Mapping[str, str], key: str, default: float) -> float:
    text = params.get(key)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ApiError(400, f"{key} must be a number of seconds, got {text[:60]!r}") from None
    if not value >= 0 or value == float("inf"):
        raise ApiError(400, f"{key} must be a finite number of seconds >= 0, got {text[:60]!r}")
    return value


async def goodput_report(request: web.Request) -> web.Response:
    """``trainguard goodput`` over HTTP: rows per group plus the recent failures by cause."""
    state = request.app[STATE]
    params = _params(request, ("since", "by", "job_timeout", "manual_delay"))
    by = params.get("by", "workload")
    if by not in goodput.GROUPINGS:
        raise ApiError(400, f"by must be one of {', '.join(goodput.GROUPINGS)}, got {by[:60]!r}")
    assume = goodput.Assumptions(
        job_timeout_s=_seconds_param(params, "job_timeout", goodput.DEFAULT_JOB_TIMEOUT_S),
        manual_delay_s=_seconds_param(params, "manual_delay", goodput.DEFAULT_MANUAL_DELAY_S))
    facts = await goodput_facts.attempt_facts(state.store().sql_engine, since=_time(params, "since"))
    accounts = await asyncio.to_thread(goodput.account, facts, now=time.time(), assume=assume)  # off the loop
    items = []
    for row in await asyncio.to_thread(goodput.rows, accounts, by=by):
        group = str(row[by] if by == "workload" else row.pop(by))
        items.append(models.GoodputRow(group=group, **row))
    failures = sorted((a.failure for a in accounts if a.failure is not None), key=lambda f: f.onset_at)
    shown = []
    for f in failures[-_GOODPUT_FAILURES:]:
        fields = goodput.failure_json(f)
        fields["onset"] = _iso(fields.pop("onset_at"))
        shown.append(models.GoodputFailure.model_validate(fields))
    return _json(models.GoodputReport(by=by, items=items, failures=shown, job_timeout_seconds=assume.job_timeout_s,
                                      manual_delay_seconds=assume.manual_delay_s))


# ---------------------------------------------------------------- health, identity, live stream


async def engine_health(request: web.Request) -> web.Response:
    state = request.app[STATE]
    _params(request, ())
    alive, live = state.health.liveness()
    ready, why = state.health.readiness()
    engine = state.backend.engine
    return _json(models.EngineHealth(
        alive=alive, ready=ready, reasons=list(why["reasons"]), loop_lag_s=float(live["loop_lag_s"]),
        heartbeat_age_s=live["heartbeat_age_s"], scheduler=dict(why["scheduler"]), store=dict(why["store"]),
        standby=why["standby"], leader=True if engine is not None else (False if why["standby"] else None),
        engine_running=engine is not None, tracked_workloads=len(engine.runtimes) if engine is not None else 0,
    ))


async def whoami(request: web.Request) -> web.Response:
    _params(request, ())
    who = auth.principal_of(request)
    return _json(models.WhoAmI(user=who.user, role=who.role, auth=who.auth))


async def events(request: web.Request) -> web.StreamResponse:
    """Server-Sent Events: every audit record written from now on (``workload=ID`` narrows it)."""
    state = request.app[STATE]
    params = _params(request, ("workload",))
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


async def openapi_document(request: web.Request) -> web.Response:
    _params(request, ())
    return web.json_response(openapi.document())


# ---------------------------------------------------------------- errors and installation


@web.middleware
async def errors(request: web.Request,
                 handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    """API errors as ``models.Error`` JSON; an unexpected error is logged and a 500 says only that."""
    if not request.path.startswith(PREFIX):
        return await handler(request)
    try:
        return await handler(request)
    except ApiError as exc:
        return _json(models.Error(error=exc.message, status=exc.status), exc.status)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        message = {404: f"no such API path {request.path[:200]}",
                   405: f"method {request.method} not allowed on {request.path[:200]}"}.get(exc.status, exc.reason)
        return _json(models.Error(error=message, status=exc.status), exc.status)
    except Exception as exc:
        failure = health_mod.classify(exc)
        if failure is not None:
            logger.warning("API %s: %s unreachable: %s", request.path, failure, health_mod.one_line(exc))
            return _json(models.Error(error=f"{failure} unreachable: {health_mod.one_line(exc)}", status=503), 503)
        logger.exception("API %s failed", request.path)
        return _json(models.Error(error="internal error (logged by the server)", status=500), 500)


# ---------------------------------------------------------------- scorecard


async def get_scorecard(request: web.Request) -> web.Response:
    """The Monitor-mode scorecard (docs/scorecard.md) with the default readiness rule; the engine's
    scheduler is read when this process runs one, else only the store's records count."""
    from trainguard.observe import scorecard, scorecard_facts

    state = request.app[STATE]
    params = _params(request, ("policy", "workload"))
    engine = state.backend.engine
    rows = await scorecard_facts.gather(state.store(), engine.scheduler if engine is not None else None,
                                        policy=params.get("policy"), workload=params.get("workload"))
    return _json(models.Scorecard(
        items=[models.ScorecardRow.model_validate(row.to_json()) for row in rows],
        summaries=[models.ScorecardSummary.model_validate(s) for s in scorecard.summarise(rows, scorecard.Readiness())],
    ))


# ---------------------------------------------------------------- backtest

BACKTEST_SECONDS: Final = 30.0
"""The run-time bound of one backtest request (about 10,000 decisions take ~10 s on 2 busy cores)."""
BACKTEST_ROWS: Final = 1000
"""At most this many rows in one answer (the summary always covers every decision)."""


async def run_backtest(request: web.Request) -> web.Response:
    """Replay the signal journal's decisions under the posted policy (read role: nothing changes)."""
    from trainguard.journal import backtest
    from trainguard.policy import loader
    from trainguard.store import journal as journal_store

    state = request.app[STATE]
    _params(request, ())
    body: models.BacktestRequest = await _body(request, models.BacktestRequest)
    try:
        policies = loader.parse_text(body.policy, "the posted policy")
    except loader.PolicyError as exc:
        raise ApiError(400, str(exc)) from None
    journal = journal_store.JournalStore(state.store().sql_engine, retention_s=0, max_bytes=0)
    decisions = await backtest.load(journal, workload=body.workload, since=_epoch(body.since), until=_epoch(body.until))
    deadline = time.monotonic() + BACKTEST_SECONDS
    try:
        rows, summary = await asyncio.to_thread(backtest.run, decisions, policies, every=body.all, deadline=deadline)
    except backtest.TooLong as exc:
        raise ApiError(400, f"the backtest took longer than {BACKTEST_SECONDS:.0f} s ({exc}): narrow it with "
                            "since, until or workload, or run `trainguard backtest`") from None
    return _json(models.BacktestResult(rows=[models.BacktestRow.model_validate(r) for r in rows[:BACKTEST_ROWS]],
                                       truncated=len(rows) > BACKTEST_ROWS,
                                       summary=models.BacktestSummary.model_validate(summary)))


def _epoch(when: datetime.datetime | None) -> float | None:
    """An ISO time of a request body as epoch seconds (no offset means UTC, as everywhere in the API)."""
    if when is None:
        return None
    return (when if when.tzinfo is not None else when.replace(tzinfo=datetime.UTC)).timestamp()


ROUTES: Final = (
    ("GET", "/openapi.json", openapi_document),
    ("GET", "/whoami", whoami),
    ("GET", "/workloads", list_workloads),
    ("POST", "/workloads/{id:.+}/acknowledge", acknowledge),
    ("GET", "/workloads/{id:.+}", get_workload),
    ("GET", "/audit", search_audit),
    ("GET", "/policies", list_policies),
    ("POST", "/policies/{name}/mode", set_policy_mode),
    ("GET", "/nodes", list_nodes),
    ("POST", "/nodes/{node}/undo-drain", undo_drain),
    ("GET", "/goodput", goodput_report),
    ("GET", "/health", engine_health),
    ("POST", "/backtest", run_backtest),
    ("GET", "/events", events),
    ("GET", "/scorecard", get_scorecard),
    *pause_routes.ROUTES,
    *breaker_routes.ROUTES,
)


def install(app: web.Application, state: State, tokens: auth.TokenBook | None,
            reviewer: auth.Reviewer | None = None) -> None:
    """Mount ``/api/v1`` with authentication, roles, CSRF and the security headers on ``app``
    (the probes stay open; ``/metrics`` and the console are behind the same tokens)."""
    app[STATE] = state
    app[login.SESSIONS] = login.Sessions()
    app.middlewares.append(auth.middleware(tokens, reviewer, app[login.SESSIONS]))
    app.middlewares.append(errors)
    app.on_response_prepare.append(auth.security_headers)
    for method, path, handler in ROUTES:
        app.router.add_route(method, PREFIX + path, handler)
    lost = goodput.collector_on(state.health.metrics.registry)

    async def refresh_goodput() -> None:
        store = state.backend.store
        if store is not None:
            await lost.refresh(store.sql_engine, now=time.time())

    app.setdefault(http_app.BEFORE_SCRAPE, []).append(refresh_goodput)

    async def close_hub(_: web.Application) -> None:
        await state.hub.close()  # ends every open stream, so shutdown does not wait for them

    app.on_shutdown.append(close_hub)


@dataclasses.dataclass
class Fixed:
    """A ``Backend`` whose store and engine are set by the shell (``trainguard run``)."""

    store: audit.AuditStore | None = None
    engine: engine_mod.Engine | None = None


Setup = Callable[[web.Application], None]


def mount(backend: Backend, health: health_mod.Health, *, listen: str, token_file: Path | None,
          allow_action: bool, operator: bool, reviewer: auth.Reviewer | None = None) -> Setup:
    """What ``http.app.serve`` calls on its application: the API behind the tokens of ``token_file``
    and, in the operator, Kubernetes' review of any other bearer token (``reviewer``).

    Without a token file on loopback no authentication is asked for (the contract's default). Off
    loopback without a token file, the operator authenticates every caller with ``reviewer``;
    ``trainguard run`` (no reviewer) refuses to start: ValueError, one line, as for an unreadable
    token file.
    """
    tokens = auth.load_tokens(token_file) if token_file is not None else None
    address = http_app.parse_listen(listen)
    loopback = address is None or auth.is_loopback(address[0])
    active = reviewer if operator and (tokens is not None or not loopback) else None
    if address is not None:
        auth.check_exposure(address[0], tokens, active)
    state = State(backend, health, allow_action=allow_action, policies_editable=not operator)

    def setup(app: web.Application) -> None:
        install(app, state, tokens, active)

    return setup
