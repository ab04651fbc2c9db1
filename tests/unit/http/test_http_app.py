"""The HTTP surface on a real socket (aiohttp server and client, loopback, a free port):
/healthz is liveness, /readyz is readiness with a JSON reason and 503, /metrics is Prometheus text;
`--http-listen` parsing; an application factory later layers add routes to."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp import web

from trainguard import health as health_mod
from trainguard.http import app as http_app
from trainguard.schedulers import base

pytestmark = pytest.mark.unit


async def test_probes_and_metrics() -> None:
    health = health_mod.Health()
    extra = web.RouteTableDef()

    @extra.get("/hello")
    async def hello(_: web.Request) -> web.Response:
        return web.Response(text="hi")

    server = await http_app.serve(health, "127.0.0.1:0", routes=extra)
    assert server is not None and server.address is not None and server.address[1] > 0
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(server.url + "/healthz") as response:
                assert response.status == 200 and (await response.json())["alive"] is True
            async with session.get(server.url + "/readyz") as response:
                assert response.status == 503
                assert (await response.json())["reasons"] == ["scheduler: not reached yet", "store: not reached yet"]
            health.round_succeeded("recover", health_mod.SCHEDULER, health_mod.STORE)
            async with session.get(server.url + "/readyz") as response:
                assert response.status == 200 and (await response.json())["ready"] is True
            health.round_failed("discover", base.SchedulerError("connect failure"))
            async with session.get(server.url + "/readyz") as response:
                body = await response.json()
                assert response.status == 503
                assert "scheduler unreachable since" in body["reasons"][0] and "connect failure" in body["reasons"][0]
            async with session.get(server.url + "/metrics") as response:
                text = await response.text()
                assert response.status == 200 and response.content_type == "text/plain"
            assert 'trainguard_dependency_errors_total{dependency="scheduler"} 1.0' in text
            assert 'trainguard_dependency_reachable{dependency="scheduler"} 0.0' in text
            assert 'trainguard_dependency_reachable{dependency="store"} 1.0' in text
            assert "trainguard_event_loop_lag_seconds" in text and "trainguard_heartbeat_age_seconds" in text
            async with session.get(server.url + "/hello") as response:
                assert await response.text() == "hi"
    finally:
        await server.stop()


async def test_off_serves_nothing() -> None:
    assert await http_app.serve(health_mod.Health(), "off") is None


@pytest.mark.parametrize(("text", "parsed"), [
    ("127.0.0.1:8080", ("127.0.0.1", 8080)), ("0.0.0.0:0", ("0.0.0.0", 0)), ("[::1]:9090", ("::1", 9090)),
    ("OFF", None),
])
def test_parse_listen(text: str, parsed: tuple[str, int] | None) -> None:
    assert http_app.parse_listen(text) == parsed


@pytest.mark.parametrize("text", ["8080", "host:", "host:http", "1.2.3.4:70000", "[nope]:80"])
def test_parse_listen_errors_are_one_line(text: str) -> None:
    with pytest.raises(ValueError, match="--http-listen"):
        http_app.parse_listen(text)
