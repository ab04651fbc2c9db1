"""`trainguard doctor` on Loki. No Loki server may be run here (its licence), so the server is an
aiohttp app answering exactly as Loki's documented HTTP API does (``/ready``,
``/loki/api/v1/status/buildinfo``, ``/loki/api/v1/labels``, ``/loki/api/v1/query_range`` with
resultType ``streams``, nanosecond timestamps as strings)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from tests.support.doctor import run_doctor, serve

pytestmark = [pytest.mark.integration]

MEMORY_DB = "sqlite+aiosqlite:///:memory:"

BUILDINFO = {"version": "3.4.2", "revision": "a1b2c3d", "branch": "HEAD", "buildUser": "root@buildkitsandbox",
             "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.23.4"}


def loki_app(*, labels: dict[str, str], ready: bool = True, token: str | None = None, tenant: str | None = None,
             age_s: float = 2.0) -> web.Application:
    async def check_auth(request: web.Request) -> None:
        if token and request.headers.get("Authorization") != token:
            raise web.HTTPUnauthorized(text="unauthorized\n")
        if tenant and request.headers.get("X-Scope-OrgID") != tenant:
            raise web.HTTPUnauthorized(text="no org id\n")

    async def ready_h(request: web.Request) -> web.Response:
        await check_auth(request)
        if not ready:
            return web.Response(status=503, text="Ingester not ready: waiting for 15s after being ready\n")
        return web.Response(text="ready\n")

    async def buildinfo(request: web.Request) -> web.Response:
        await check_auth(request)
        return web.json_response(BUILDINFO)

    async def label_names(request: web.Request) -> web.Response:
        await check_auth(request)
        return web.json_response({"status": "success", "data": sorted(labels)})

    async def query_range(request: web.Request) -> web.Response:
        await check_auth(request)
        query = request.query["query"]
        wanted = query.strip("{}").split("=~", 1)[0]
        assert request.query["direction"] == "backward"
        result = []
        if wanted in labels:
            ns = time.time_ns() - int(age_s * 1e9)
            result.append({"stream": labels, "values": [[str(ns), "step 10 loss 1.23"],
                                                         [str(ns - 10**9), "step 9 loss 1.25"]]})
        return web.json_response({"status": "success", "data": {"resultType": "streams", "result": result,
                                                                "stats": {}}})

    app = web.Application()
    app.router.add_get("/ready", ready_h)
    app.router.add_get("/loki/api/v1/status/buildinfo", buildinfo)
    app.router.add_get("/loki/api/v1/labels", label_names)
    app.router.add_get("/loki/api/v1/query_range", query_range)
    return app


@pytest.fixture
def good_loki() -> Iterator[str]:
    with serve(loki_app(labels={"job_id": "4242", "host": "node1", "filename": "/jobs/slurm-4242.out"})) as url:
        yield url


def test_good_loki_passes_with_version_sample_and_lag(good_loki: str, monkeypatch: pytest.MonkeyPatch) -> None:
    run = run_doctor(monkeypatch, "--loki-url", good_loki, "--db", MEMORY_DB)
    assert run.code == 0, run.checks
    assert run.status("loki") == "ok" and "3.4.2" in run.check("loki")["message"]
    streams = run.check("loki.streams")
    assert streams["status"] == "ok"
    assert 'job_id="4242"' in streams["details"]["sample"]["stream"]
    lag = run.check("loki.lag")
    assert lag["status"] == "ok" and 1.0 <= lag["details"]["lag_s"] < 60


def test_names_a_wrong_job_label(monkeypatch: pytest.MonkeyPatch) -> None:
    with serve(loki_app(labels={"slurm_job": "4242", "host": "node1"})) as url:
        run = run_doctor(monkeypatch, "--loki-url", url, "--db", MEMORY_DB)
    assert run.code == 1 and run.failed() == ["loki.streams"]
    assert "'job_id'" in run.check("loki.streams")["message"] and "slurm_job" in run.check("loki.streams")["message"]
    assert "loki_job_label" in run.check("loki.streams")["fix"]


def test_names_a_missing_host_label_as_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    with serve(loki_app(labels={"job_id": "4242", "filename": "/jobs/slurm-4242.out"})) as url:
        run = run_doctor(monkeypatch, "--loki-url", url, "--db", MEMORY_DB)
    assert run.code == 0 and run.status("loki.streams") == "warn"
    assert "loki_host_label" in run.check("loki.streams")["message"]


def test_names_auth_not_ready_and_down(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with serve(loki_app(labels={"job_id": "1", "host": "n", "filename": "f"}, token="Basic dTpw",
                        tenant="team-a")) as url:
        run = run_doctor(monkeypatch, "--loki-url", url, "--db", MEMORY_DB)
        assert run.failed() == ["loki"] and "authentication" in run.check("loki")["message"]
        assert "loki_tenant" in run.check("loki")["fix"]
        secret = tmp_path / "password"
        secret.write_text("p\n")
        user = run_doctor(monkeypatch, "--loki-url", url, "--db", MEMORY_DB, "--loki-tenant", "team-a",
                          "--loki-username", "u", "--loki-password-file", str(secret))
        assert user.code == 0, user.checks  # the same tenant and basic auth the Loki source sends
        missing = run_doctor(monkeypatch, "--loki-url", url, "--db", MEMORY_DB, "--loki-tenant", "team-a",
                             "--loki-username", "u", "--loki-password-file", str(tmp_path / "nope"))
        assert missing.failed() == ["loki"] and "loki_password_file" in missing.check("loki")["message"]
    with serve(loki_app(labels={"job_id": "1"}, ready=False)) as url:
        run = run_doctor(monkeypatch, "--loki-url", url, "--db", MEMORY_DB)
        assert run.failed() == ["loki"] and "503" in run.check("loki")["message"]
    down = url  # the server above is stopped now
    run = run_doctor(monkeypatch, "--loki-url", down, "--db", MEMORY_DB)
    assert run.code == 1 and run.failed() == ["loki"] and "cannot connect" in run.check("loki")["message"]


def test_old_newest_line_is_a_lag_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    with serve(loki_app(labels={"job_id": "7", "host": "node2", "filename": "f"}, age_s=1200)) as url:
        run = run_doctor(monkeypatch, "--loki-url", url, "--db", MEMORY_DB)
    assert run.code == 0 and run.status("loki.lag") == "warn"
