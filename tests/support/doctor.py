"""Running ``trainguard doctor`` in a test: in this process, with only the given settings, its
one JSON object parsed and checked against the contract."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.support import services, slurm
from tests.support.log_shipper import now_rfc3339
from trainguard.cli import main as cli_main
from trainguard.doctor import logs
from trainguard.store import database


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


@dataclass
class AccountingCluster:
    """A one-node cluster whose slurmctld stores accounting in a real slurmdbd (on a private MariaDB);
    ``configure(flags)`` rewrites AccountingStoreFlags and restarts slurmctld."""

    env: dict[str, str]
    script_env: dict[str, str]
    dbd_port: int

    def configure(self, store_flags: str | None) -> None:
        extra = ["AccountingStorageType=accounting_storage/slurmdbd", "AccountingStorageHost=localhost",
                 f"AccountingStoragePort={self.dbd_port}"]
        if store_flags:
            extra.append(f"AccountingStoreFlags={store_flags}")
        services.run_script([str(slurm.SCRIPT), "up"], {**self.script_env, "TG_SLURM_CONF_EXTRA": "\n".join(extra)})


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


def migrated_sqlite(tmp_path: Path) -> str:
    """An SQLite audit database at the current schema, as `trainguard run` leaves it."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}"

    async def create() -> None:
        store = await database.open_store(url)
        await store.close()

    asyncio.run(create())
    return url


def push_lines(url: str, rows: list[dict[str, str]], stream_fields: str) -> None:
    """Ship ``rows`` to VictoriaLogs at ``url`` as a production shipper does (JSON lines, the
    ``application/stream+json`` Content-Type without which nothing is stored, stream fields)."""
    body = "".join(json.dumps({"_time": now_rfc3339(), **row}) + "\n" for row in rows).encode()
    query = urllib.parse.urlencode({"_stream_fields": stream_fields, "_msg_field": "log", "_time_field": "_time"})
    request = urllib.request.Request(f"{url}/insert/jsonline?{query}", data=body, method="POST",
                                     headers={"Content-Type": "application/stream+json"})
    with urllib.request.urlopen(request, timeout=30) as resp:
        assert resp.status == 200


def wait_queryable(url: str, count: int, timeout: float = 60) -> None:
    """Rows become visible to queries about a second after ingest: wait for them, not for a time. Asked
    within doctor's own window (``doctor.logs.RECENT``), as doctor will ask: a row counted by a query over
    all time was once not yet returned by doctor's windowed one under load."""
    query = urllib.parse.urlencode({"query": f"_time:{logs.RECENT} | count() rows"})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{url}/select/logsql/query?{query}", timeout=30) as resp:
            lines = [json.loads(line) for line in resp.read().decode().splitlines() if line.strip()]
        if lines and int(lines[0].get("rows", 0)) >= count:
            return
        time.sleep(0.2)
    raise AssertionError(f"{count} rows not queryable within {timeout} s")
