"""Running ``trainguard doctor`` in a test: in this process, with only the given settings, its
one JSON object parsed and checked against the contract."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web

from trainguard.cli import main as cli_main


@dataclass(frozen=True)
class DoctorRun:
    code: int
    checks: list[dict[str, Any]]

    def status(self, name: str) -> str:
        return self.check(name)["status"]

    def check(self, name: str) -> dict[str, Any]:
        found = [c for c in self.checks if c["name"] == name]
        assert found, f"no check {name!r} in {[c['name'] for c in self.checks]}"
        return found[0]

    def failed(self) -> list[str]:
        return [c["name"] for c in self.checks if c["status"] == "fail"]


def run_doctor(monkeypatch: pytest.MonkeyPatch, *args: str, env: Mapping[str, str] | None = None) -> DoctorRun:
    """``trainguard doctor --format json ARGS`` in this process, with only ``env`` as settings."""
    for name in list(os.environ):
        if name.startswith(("TRAINGUARD_", "SLURM_")):
            monkeypatch.delenv(name)
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli_main.main(["doctor", "--format", "json", "--check-timeout", "20", *args])
    lines = out.getvalue().splitlines()
    assert len(lines) == 1, f"expected one JSON object, got {out.getvalue()!r}"
    report = json.loads(lines[0])
    assert set(report) == {"checks"}
    for check in report["checks"]:
        assert check["status"] in ("ok", "warn", "fail") and check["name"] and check["message"]
    return DoctorRun(code, report["checks"])


@dataclass(frozen=True)
class BrokenCluster:
    env: dict[str, str]
    """SLURM_CONF (and PATH for a cluster from a root) of the JobRequeue=0 cluster."""


@contextlib.contextmanager
def serve(app: web.Application) -> Iterator[str]:
    """``app`` on a free loopback port, run by its own event loop in a thread (doctor runs its own
    loop in the test's thread); yields the base URL."""
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    ready = threading.Event()
    state: dict[str, Any] = {}

    async def start() -> None:
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        state["port"] = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        ready.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop).result(30)
    assert ready.is_set()
    try:
        yield f"http://127.0.0.1:{state['port']}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()
