"""``/api/v1/nodes``: the nodes our recoveries took out of service or put back, with the incidents
charged to them and their lifecycle state (``model.lifecycle``, as ``trainguard nodes`` shows it),
one node's lifecycle (``/nodes/{node}``), a person's hold and return (write role, recorded with who,
``store.nodes.decide_node``; the return itself is the engine's undrain sweep), and the undo of our
own drain (write role).

A drain or a Kubernetes exclusion is undoable while it is the node's latest and no resume of ours
followed it; the undo goes through the act layer's undrainer (``act.undrain``), like the automatic
undrain, and is audited. A resume the scheduler refuses is a 502 with its error.

Place: a route module of ``http.api`` (which mounts it).
"""

from __future__ import annotations

import time
from typing import Final

from aiohttp import web

from trainguard.act import undrain
from trainguard.http import auth, models
from trainguard.http.common import STATE, ApiError, answer, audit_item, iso, query, read_body, time_of
from trainguard.model import actions, lifecycle
from trainguard.store import audit

NODE_WINDOW_S: Final = 30 * 86400.0
"""How far back the list looks without ``since``."""
_NODE_OPS: Final = (actions.Operation.DRAIN_NODE.value, actions.Operation.RESUME_NODE.value,
                     actions.Operation.EXCLUDE_NODES.value)
"""Rows that take a node out of service or put it back (``act.undrain.nodes_out``: on Kubernetes an
exclusion is a cordon plus taint of the node for everyone, undone like a drain)."""


async def list_nodes(request: web.Request) -> web.Response:
    state = request.app[STATE]
    params = query(request, ("since",))
    since = time_of(params, "since") or audit.to_datetime(time.time() - NODE_WINDOW_S)
    store = state.store()
    nodes: dict[str, models.NodeItem] = {}

    def item(name: str) -> models.NodeItem:
        return nodes.setdefault(name, models.NodeItem(node=name, incidents=[], actions=[]))

    for hit in await store.node_history(since=since.timestamp()):
        item(hit.node).incidents.append(models.NodeIncident(workload=hit.workload, attempt=hit.attempt,
                                                            category=hit.category, at=iso(hit.at) or ""))
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
    for t in await store.node_states():
        entry = item(t.node)
        entry.state, entry.reason, entry.since, entry.by = t.state.value, t.reason, iso(t.at), t.by
    return answer(models.NodeList(items=[nodes[n] for n in sorted(nodes)], since=audit.iso_utc(since)))


def _transition(t: lifecycle.Transition) -> models.NodeTransition:
    return models.NodeTransition(state=t.state.value, event=t.event.value, reason=t.reason, by=t.by,
                                 at=iso(t.at) or "", workload=t.workload, attempt=t.attempt, evidence=t.evidence)


async def show_node(request: web.Request) -> web.Response:
    state = request.app[STATE]
    query(request, ())
    node = request.match_info["node"]
    store = state.store()
    history = await store.node_transitions(node)
    incidents = [models.NodeIncident(workload=i.workload, attempt=i.attempt, category=i.category, at=iso(i.at) or "")
                 for i in await store.node_history(since=0.0) if i.node == node]
    if not history and not incidents:
        raise ApiError(404, f"nothing recorded of {node} (in service as far as Trainguard knows)")
    last = history[-1] if history else None
    return answer(models.NodeDetail(
        node=node, state=last.state.value if last else lifecycle.NodeState.IN_SERVICE.value,
        reason=last.reason if last else "", since=iso(last.at) if last else None, by=last.by if last else "",
        history=[_transition(t) for t in history], incidents=incidents))


async def _decide(request: web.Request, event: lifecycle.NodeEvent) -> web.Response:
    state = request.app[STATE]
    query(request, ())
    node = request.match_info["node"]
    body = await read_body(request, models.NodeDecision)
    who = auth.principal_of(request)
    try:
        moved = await state.store().decide_node(node, event, by=who.user, channel="api", at=time.time(),
                                                reason=body.reason)
    except lifecycle.Refused as exc:
        raise ApiError(409, f"refused, nothing changed: {exc}") from None
    then = "the engine resumes it at its next sweep if it is still our drain" if event is lifecycle.NodeEvent.CLEARED \
        else "no rule of time resumes it until a person returns it"
    return answer(models.MutationResult(ok=True, message=f"{node}: {moved.state.value} (by {moved.by}): {then}"))


async def hold_node(request: web.Request) -> web.Response:
    return await _decide(request, lifecycle.NodeEvent.HELD)


async def return_node(request: web.Request) -> web.Response:
    return await _decide(request, lifecycle.NodeEvent.CLEARED)


async def undo_drain(request: web.Request) -> web.Response:
    state = request.app[STATE]
    query(request, ())
    node = request.match_info["node"]
    if request.body_exists:
        await read_body(request, models.Acknowledge)
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
    return answer(models.MutationResult(ok=True, message=message, audit=audit_item(record)))


ROUTES = (
    ("GET", "/nodes", list_nodes),
    ("POST", "/nodes/{node}/undo-drain", undo_drain),
    ("GET", "/nodes/{node}", show_node),
    ("POST", "/nodes/{node}/hold", hold_node),
    ("POST", "/nodes/{node}/return", return_node),
)
