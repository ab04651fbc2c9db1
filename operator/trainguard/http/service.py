"""``/api/v1/health``, ``/api/v1/whoami``, ``/api/v1/openapi.json``: what the service says about
itself: the engine's health as the probes see it (plus leadership and tracked workloads), who the
caller is, and the OpenAPI document generated from ``http/models.py``.

Place: a route module of ``http.api`` (which mounts it).
"""

from __future__ import annotations

from aiohttp import web

from trainguard.http import auth, models, openapi
from trainguard.http.common import STATE, answer, query


async def engine_health(request: web.Request) -> web.Response:
    state = request.app[STATE]
    query(request, ())
    alive, live = state.health.liveness()
    ready, why = state.health.readiness()
    engine = state.backend.engine
    return answer(models.EngineHealth(
        alive=alive, ready=ready, reasons=list(why["reasons"]), loop_lag_s=float(live["loop_lag_s"]),
        heartbeat_age_s=live["heartbeat_age_s"], scheduler=dict(why["scheduler"]), store=dict(why["store"]),
        standby=why["standby"], leader=True if engine is not None else (False if why["standby"] else None),
        engine_running=engine is not None, tracked_workloads=len(engine.runtimes) if engine is not None else 0,
    ))


async def whoami(request: web.Request) -> web.Response:
    query(request, ())
    who = auth.principal_of(request)
    return answer(models.WhoAmI(user=who.user, role=who.role, auth=who.auth))


async def openapi_document(request: web.Request) -> web.Response:
    query(request, ())
    return web.json_response(openapi.document())


ROUTES = (
    ("GET", "/openapi.json", openapi_document),
    ("GET", "/whoami", whoami),
    ("GET", "/health", engine_health),
)
