"""External attribution against a real aiohttp server on 127.0.0.1: answers and every failure mode.

Marked ``integration`` because it opens loopback sockets; it needs nothing but this process.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from trainguard.attribute import external
from trainguard.model import anomalies, verdicts, vocab

pytestmark = pytest.mark.integration

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

ANOMALY = anomalies.Anomaly(
    symptom=vocab.Symptom.CRASH,
    category=vocab.Category.NCCL_TIMEOUT,
    evidence=[
        anomalies.Evidence(
            line=7,
            text="Watchdog caught collective operation timeout",
            pattern="nccl.watchdog_timeout",
            node="n1",
            rank=0,
        )
    ],
)
BUILTIN = verdicts.Verdict(
    attribution=vocab.Attribution.UNKNOWN, category=vocab.Category.NCCL_TIMEOUT, confidence=0.2, lemon_nodes=["n3"]
)


class Service:
    """A real HTTP server whose answer each test chooses; it records what it received."""

    def __init__(self) -> None:
        self.handler: Handler = self._ok
        self.received: list[Any] = []
        self.release = asyncio.Event()

    async def _ok(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"attribution": "hardware", "nodes": ["n3"], "confidence": 0.8})

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        self.received.append(await request.json())
        return await self.handler(request)


@pytest.fixture
async def service() -> AsyncIterator[tuple[Service, str]]:
    state = Service()
    app = web.Application()
    app.router.add_post("/attribute", state.dispatch)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield state, str(server.make_url("/attribute"))
    finally:
        state.release.set()
        await server.close()


async def test_answer_becomes_the_verdict(service: tuple[Service, str]) -> None:
    state, url = service
    state.handler = lambda request: _json(
        {
            "attribution": "hardware",
            "nodes": ["n3", "n3"],
            "confidence": 0.8,
            "category": "ecc_memory",
            "ranks": [5],
            "reasons": ["ECC DBE on GPU 2"],
            "extra": "ignored",
        }
    )
    verdict = await external.ExternalAttribution(url, timeout_s=5.0).attribute(
        ANOMALY, BUILTIN, workload="w", attempt=2
    )
    assert verdict.attribution == vocab.Attribution.HARDWARE
    assert verdict.category == vocab.Category.ECC_MEMORY
    assert (verdict.suspect_nodes, verdict.suspect_ranks, verdict.confidence) == (["n3"], [5], 0.8)
    assert verdict.source == url
    assert verdict.fallback_reason is None
    assert verdict.reasons == [f"external attribution {url}", "ECC DBE on GPU 2"]
    assert verdict.lemon_nodes == ["n3"]
    request = state.received[0]
    assert (request["schemaVersion"], request["workload"], request["attempt"]) == (1, "w", 2)
    assert request["anomaly"]["evidence"][0]["pattern"] == "nccl.watchdog_timeout"
    assert request["builtin"]["attribution"] == "unknown"
    assert "lemon_nodes" not in request["builtin"]


async def test_borrowed_session_is_left_open(service: tuple[Service, str]) -> None:
    _, url = service
    async with aiohttp.ClientSession() as session:
        client = external.ExternalAttribution(url, timeout_s=5.0, session=session)
        first = await client.attribute(ANOMALY, BUILTIN)
        second = await client.attribute(ANOMALY, BUILTIN)
        assert not session.closed
    assert first == second and first.attribution == vocab.Attribution.HARDWARE


async def test_slow_service_falls_back(service: tuple[Service, str]) -> None:
    state, url = service

    async def stall(request: web.Request) -> web.StreamResponse:
        await state.release.wait()
        return web.json_response({})

    state.handler = stall
    verdict = await external.ExternalAttribution(url, timeout_s=0.05).attribute(ANOMALY, BUILTIN)
    assert verdict.attribution == BUILTIN.attribution
    assert verdict.fallback_reason == f"external attribution {url}: no answer within 0.05 s"


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    [
        (500, b'{"attribution": "hardware", "nodes": [], "confidence": 1}', "HTTP 500"),
        (404, b"not here", "HTTP 404"),
        (302, b"", "HTTP 302"),
        (200, b"<html>garbage</html>", "malformed response"),
        (200, b"", "malformed response"),
        (200, b'["hardware"]', "malformed response"),
        (200, b'{"attribution": "cosmic rays", "nodes": [], "confidence": 0.5}', "malformed response"),
        (200, b'{"attribution": "none", "nodes": [], "confidence": 0.5}', "malformed response"),
        (200, b'{"attribution": "hardware", "nodes": ["n1; rm -rf /"], "confidence": 0.5}', "malformed response"),
        (200, b'{"attribution": "hardware", "nodes": ["n1"], "confidence": 7}', "malformed response"),
        (200, b'{"attribution": "hardware", "nodes": ["n1"]}', "malformed response"),
        (200, b'{"attribution": "hardware", "nodes": "n1", "confidence": 0.5}', "malformed response"),
        (200, b" " * (external.MAX_RESPONSE_BYTES + 1), "response larger than"),
    ],
)
async def test_bad_answers_fall_back(service: tuple[Service, str], status: int, body: bytes, reason: str) -> None:
    state, url = service
    headers = {"Location": "http://127.0.0.1:1/elsewhere"} if status == 302 else {}
    state.handler = lambda request: _raw(status, body, headers)
    verdict = await external.ExternalAttribution(url, timeout_s=5.0).attribute(ANOMALY, BUILTIN)
    assert verdict.model_copy(update={"fallback_reason": None}) == BUILTIN
    assert verdict.fallback_reason is not None and reason in verdict.fallback_reason


async def test_service_down_falls_back() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://user:secret@127.0.0.1:{port}/attribute?token=abc"
    verdict = await external.ExternalAttribution(url, timeout_s=5.0).attribute(ANOMALY, BUILTIN)
    assert verdict.attribution == BUILTIN.attribution
    assert verdict.fallback_reason is not None
    assert verdict.fallback_reason.startswith(f"external attribution http://127.0.0.1:{port}/attribute: request failed")
    assert "secret" not in verdict.fallback_reason and "token" not in verdict.fallback_reason


async def _json(payload: dict[str, Any]) -> web.StreamResponse:
    return web.json_response(payload)


async def _raw(status: int, body: bytes, headers: dict[str, str]) -> web.StreamResponse:
    return web.Response(status=status, body=body, headers=headers, content_type="application/json")
