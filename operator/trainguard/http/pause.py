"""``/api/v1/actions``: the runtime pause of every recovery action, read and set over HTTP.

The same control as ``trainguard actions pause|resume`` (``act.switch``, the store's ``controls``
table): setting it takes effect at the next step of every recovery in every replica, without a
restart, and is audited (kind ``action``, no workload, decided by ``api``, ``by`` the caller). The
write role is needed to set or clear it (``http.auth``); anyone who may read may see it.

Place: a route module of ``http.api`` (which mounts ``ROUTES``); the API's state and helpers are
``http.common``.
"""

from __future__ import annotations

import time

from aiohttp import web

from trainguard.act import switch
from trainguard.http import auth, models
from trainguard.http.common import STATE, answer, query, read_body
from trainguard.model import times, vocab
from trainguard.store import audit


def view(allow_action: bool, record: audit.ControlRecord | None,
         breaker: audit.ControlRecord | None = None) -> models.ActionsState:
    """The pause as the API shows it, with the cluster switch of this process and the breaker.
    ``acting``: whether an Action-mode policy acts now (``switch.effective_mode``, the one rule)."""
    reason = switch.pause_reason(record)
    tripped = switch.breaker_reason(breaker)
    acting = switch.effective_mode(vocab.Mode.ACTION, allow_action, reason or tripped) is vocab.Mode.ACTION
    return models.ActionsState(
        acting=acting, switch=allow_action,
        paused=reason is not None, breaker=tripped or "",
        reason=str(record.value.get("reason", "")) if record is not None and reason is not None else "",
        by=record.updated_by if record is not None else "",
        since=times.to_datetime(record.updated_at) if record is not None else None)


async def get_actions(request: web.Request) -> web.Response:
    state = request.app[STATE]
    query(request, ())
    store = state.store()
    return answer(view(state.allow_action, await store.control(switch.PAUSE), await store.control(switch.BREAKER)))


async def _set(request: web.Request, paused: bool, reason: str) -> web.Response:
    state = request.app[STATE]
    who = auth.principal_of(request)
    await state.store().set_control(
        switch.PAUSE, {"paused": paused, "reason": reason}, by=who.user, channel="api", at=time.time(),
        payload={"operation": "pause" if paused else "resume-actions", "status": "done", "reason": reason})
    if paused:
        message = "actions paused: no recovery changes the scheduler until they are resumed"
    else:
        message = "actions resumed" + ("" if state.allow_action else
                                       " (the cluster switch is off: nothing acts until --mode action)")
    return answer(models.MutationResult(ok=True, message=message))


async def pause(request: web.Request) -> web.Response:
    query(request, ())
    body: models.PauseRequest = await read_body(request, models.PauseRequest)
    return await _set(request, True, body.reason)


async def resume(request: web.Request) -> web.Response:
    query(request, ())
    return await _set(request, False, "")


ROUTES = (
    ("GET", "/actions", get_actions),
    ("POST", "/actions/pause", pause),
    ("POST", "/actions/resume", resume),
)
