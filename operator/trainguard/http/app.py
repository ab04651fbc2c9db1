"""The aiohttp application behind ``--http-listen``: ``/healthz``, ``/readyz``, ``/metrics``.

Place: served by the shells (``trainguard run``, ``trainguard operator``) on their own event loop,
reading the process's ``health.Health`` model. It knows nothing about the engine beyond that model,
so the console and the API (a later layer) extend it by passing their routes to ``build_app``
(or adding them to the returned application before ``Server.start``).

- ``/healthz`` (liveness): 200 while the event loop's heartbeat is fresh, else 503.
- ``/readyz`` (readiness): 200 when the scheduler and the store are reachable, else 503; the JSON
  body says why either way.
- ``/metrics``: Prometheus text format of the health model's registry (plus any registry a later
  layer passes).

Answers are computed from memory: a probe never waits on the scheduler or the database, so a
probe timing out means the event loop itself is stuck, which is what liveness is for.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Final

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from trainguard import health as health_mod

logger = logging.getLogger("trainguard.http")

DEFAULT_LISTEN: Final = "127.0.0.1:8080"
"""Loopback by default: nothing is exposed beyond the host unless asked (``0.0.0.0:8080`` in a pod)."""
OFF: Final = "off"

HEALTH: Final = web.AppKey("health", health_mod.Health)
REGISTRIES: Final = web.AppKey("registries", list[CollectorRegistry])
BEFORE_SCRAPE: Final = web.AppKey("before_scrape", list[Callable[[], Awaitable[None]]])
"""Awaited before ``/metrics`` renders (e.g. the goodput accounting's refresh); an error is logged
and the metrics are served as they were: a scrape must not fail for one stale family."""


def parse_listen(text: str) -> tuple[str, int] | None:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6; port 0 picks a free one) -> (host, port); ``off`` -> None.
    Raises ValueError with a one-line message."""
    value = text.strip()
    if value.lower() == OFF:
        return None
    host, sep, port_text = value.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ValueError(f"--http-listen: expected HOST:PORT or 'off', got {text!r}")
    port = int(port_text)
    if port > 65535:
        raise ValueError(f"--http-listen: port out of range in {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError as exc:
            raise ValueError(f"--http-listen: bad IPv6 address in {text!r}") from exc
    return host, port


async def _healthz(request: web.Request) -> web.Response:
    alive, body = request.app[HEALTH].liveness()
    return web.json_response(body, status=200 if alive else 503)


async def _readyz(request: web.Request) -> web.Response:
    ready, body = request.app[HEALTH].readiness()
    return web.json_response(body, status=200 if ready else 503)


async def _metrics(request: web.Request) -> web.Response:
    for refresh in request.app.get(BEFORE_SCRAPE, []):
        try:
            await refresh()
        except Exception:
            logger.exception("refreshing metrics before a scrape failed; serving the previous values")
    text = b"".join(generate_latest(registry) for registry in request.app[REGISTRIES])
    response = web.Response(body=text)
    response.headers["Content-Type"] = CONTENT_TYPE_LATEST
    return response


def build_app(health: health_mod.Health, *, routes: Iterable[web.AbstractRouteDef] = (),
              registries: Iterable[CollectorRegistry] = (),
              setup: Callable[[web.Application], None] | None = None) -> web.Application:
    """The application: the probes and metrics of ``health``, plus ``routes`` and the metrics of
    ``registries`` from later layers (console, API); ``setup`` mounts a layer that needs more than
    routes (``http.api.mount``: middlewares, auth, the live stream)."""
    app = web.Application()
    app[HEALTH] = health
    app[REGISTRIES] = [health.metrics.registry, *registries]
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/metrics", _metrics)
    app.router.add_routes(list(routes))
    if setup is not None:
        setup(app)
    return app


class Server:
    """An application served on one address, started and stopped with the shell's event loop."""

    def __init__(self, app: web.Application) -> None:
        self.app = app
        self._runner: web.AppRunner | None = None
        self.address: tuple[str, int] | None = None
        """The bound (host, port), known after ``start`` (port 0 -> the port the kernel picked)."""

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Bind and serve; returns the bound address. OSError (address in use, ...) propagates."""
        runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, host, port, reuse_address=True)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        bound = runner.addresses[0] if runner.addresses else (host, port)
        self.address = (str(bound[0]), int(bound[1]))
        return self.address

    @property
    def url(self) -> str:
        assert self.address is not None
        host, port = self.address
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()


async def serve(health: health_mod.Health, listen: str, *, routes: Iterable[web.AbstractRouteDef] = (),
                registries: Iterable[CollectorRegistry] = (),
                setup: Callable[[web.Application], None] | None = None) -> Server | None:
    """Start serving on ``listen`` (``HOST:PORT`` or ``off``) and log the bound address; None when off.
    ValueError on a malformed ``listen``; OSError when the address cannot be bound."""
    address = parse_listen(listen)
    if address is None:
        logger.info("HTTP endpoints off (--http-listen off)")
        return None
    server = Server(build_app(health, routes=routes, registries=registries, setup=setup))
    await server.start(*address)
    logger.info("HTTP endpoints on %s (/healthz, /readyz, /metrics)", server.url)
    return server
