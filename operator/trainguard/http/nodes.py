"""``/api/v1/nodes``: the nodes our recoveries took out of service or put back, with the incidents
charged to them, and the undo of our own drain (write role).

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
from trainguard.model import actions
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
    return answer(models.NodeList(items=[nodes[n] for n in sorted(nodes)], since=audit.iso_utc(since)))


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
)
