"""``/api/v1``: what the loop sees, for the console and for scripts (docs/api.md).

Place: mounted on the ``trainguard.http.app`` application by the shells (``trainguard run``,
``trainguard operator``, and ``trainguard doctor`` to check the listener) through ``mount``. This
module is the API's table of contents: ``ROUTES`` gathers the route modules, one per resource
(``workloads``, ``audit_search``, ``policies``, ``nodes``, ``reports``, ``service``, ``events``,
``pause``, ``breaker``), and ``install`` puts them behind authentication (``http.auth``) and the
error middleware. The route modules share ``http.common`` (state, ``ApiError``, request parsing).

The handlers read the audit database through ``store.queries`` (keyset pages, never whole tables),
the engine's in-memory view (policies, effective modes, tracked workloads) through a ``Backend``,
and the process's ``health.Health``. The engine knows nothing about HTTP: a mode switch goes
through ``Engine.update_policies``, an undo through the undrainer of the act layer, like any other
caller.

Errors are ``models.Error`` JSON with one sentence. Bad input is a 400 (unknown query parameters,
malformed or foreign cursors, page sizes above ``common.MAX_LIMIT``, bad times or ranges), an
unknown name a 404, a refused change a 409, an unreachable store or scheduler, or no engine in this
process, a 503, and an undo the scheduler refuses a 502. Anything else is a defect: it is logged with
its traceback and answered with a 500 that says only that. Answers are built from
``http/models.py``, the same models the OpenAPI document is generated from.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final

from aiohttp import web

from trainguard import health as health_mod
from trainguard.http import app as http_app
from trainguard.http import audit_search, auth, events, login, models, nodes, policies, reports, service, workloads
from trainguard.http import breaker as breaker_routes
from trainguard.http import pause as pause_routes
from trainguard.http.common import PREFIX, STATE, ApiError, Backend, State, answer
from trainguard.observe import goodput
from trainguard.store import audit

if TYPE_CHECKING:
    from trainguard import engine as engine_mod

logger = logging.getLogger("trainguard.http.api")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

ROUTES: Final[tuple[tuple[str, str, Handler], ...]] = (
    *service.ROUTES,
    *workloads.ROUTES,
    *audit_search.ROUTES,
    *policies.ROUTES,
    *nodes.ROUTES,
    *reports.ROUTES,
    *events.ROUTES,
    *pause_routes.ROUTES,
    *breaker_routes.ROUTES,
)
"""Method, path under ``PREFIX``, handler: every route of the API (docs/api.md lists them)."""


@web.middleware
async def errors(request: web.Request,
                 handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    """API errors as ``models.Error`` JSON; an unexpected error is logged and a 500 says only that."""
    if not request.path.startswith(PREFIX):
        return await handler(request)
    try:
        return await handler(request)
    except ApiError as exc:
        return answer(models.Error(error=exc.message, status=exc.status), exc.status)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        message = {404: f"no such API path {request.path[:200]}",
                   405: f"method {request.method} not allowed on {request.path[:200]}"}.get(exc.status, exc.reason)
        return answer(models.Error(error=message, status=exc.status), exc.status)
    except Exception as exc:
        failure = health_mod.classify(exc)
        if failure is not None:
            logger.warning("API %s: %s unreachable: %s", request.path, failure, health_mod.one_line(exc))
            return answer(models.Error(error=f"{failure} unreachable: {health_mod.one_line(exc)}", status=503), 503)
        logger.exception("API %s failed", request.path)
        return answer(models.Error(error="internal error (logged by the server)", status=500), 500)


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
