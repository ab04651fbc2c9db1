"""``/api/v1/actions/breaker/reset``: a person closes the blast-radius breaker over HTTP.

The same control as ``trainguard actions reset-breaker`` (``act.switch.BREAKER``, the store's
``controls`` table). The breaker opened by itself when an administrator's cap refused an advice
(``policy.blast_radius``, ``AuditStore.reserve_limits``) and stays open, in every replica, until a
person resets it; the reset is audited (kind ``action``, no workload, decided by ``api``, ``by`` the
caller, operation ``breaker-reset``). The write role is needed (``http.auth``: every POST).

Place: a route module of ``http.api`` (which mounts ``ROUTES``); the API's state and helpers are
``http.common``.
"""

from __future__ import annotations

import time

from aiohttp import web

from trainguard.act import switch
from trainguard.http import auth, models
from trainguard.http.common import STATE, answer, query, read_body


async def reset(request: web.Request) -> web.Response:
    state = request.app[STATE]
    query(request, ())
    body: models.PauseRequest = await read_body(request, models.PauseRequest)
    who = auth.principal_of(request)
    store = state.store()
    was_open = switch.breaker_reason(await store.control(switch.BREAKER)) is not None
    await store.set_control(
        switch.BREAKER, {"open": False, "reason": "", "reset_reason": body.reason}, by=who.user, channel="api",
        at=time.time(), payload={"operation": "breaker-reset", "status": "done", "reason": body.reason,
                                 "was_open": was_open})
    message = ("breaker reset: Action-mode policies act again on new decisions" if was_open
               else "the breaker was not open (the reset is recorded)")
    return answer(models.MutationResult(ok=True, message=message))


ROUTES = (
    ("POST", "/actions/breaker/reset", reset),
)
