"""The console's login on a real socket, with a token file: no path but the probes and the login
form answers without credentials (the console's code included); the script-free form at ``/``
turns a token into an HttpOnly, SameSite=Strict session cookie holding a random id; the cookie
works wherever a bearer token does, CSRF rules included; logout, a forged id and an expired
session all end in 401; wrong tokens are throttled; the operator's reviewer is used the same way."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from http.cookies import SimpleCookie
from pathlib import Path

import aiohttp
import pytest

from trainguard import health as health_mod
from trainguard.console import web as console_web
from trainguard.http import api as http_api
from trainguard.http import app as http_app
from trainguard.http import auth, login, principal

pytestmark = pytest.mark.unit

READ = "reader-token-0123"
WRITE = "writer-token-0123"
REVIEWED = "kubernetes-sa-token-0123456789"


async def reviewer(token: str) -> principal.Principal | None:
    """The operator's review contract (``auth.Reviewer``) for one known ServiceAccount token."""
    if token == REVIEWED:
        return principal.Principal(user="system:serviceaccount:ops:viewer", role="read", auth="kubernetes")
    return None


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[http_app.Server]:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{READ} read\n{WRITE} write\n")
    health = health_mod.Health()
    setup = http_api.mount(http_api.Fixed(), health, listen="127.0.0.1:0", token_file=tokens, allow_action=False,
                           operator=True, reviewer=reviewer)
    served = await http_app.serve(health, "127.0.0.1:0", setup=setup, routes=console_web.routes())
    assert served is not None
    try:
        yield served
    finally:
        await served.stop()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    # cookies are passed by hand: the test checks exactly what the server sets
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as s:
        yield s


async def log_in(session: aiohttp.ClientSession, url: str, token: str,
                 **headers: str) -> tuple[int, SimpleCookie, str]:
    async with session.post(url + "/login", data={"token": token}, headers=headers,
                            allow_redirects=False) as response:
        cookie: SimpleCookie = SimpleCookie()
        for header in response.headers.getall("Set-Cookie", []):
            cookie.load(header)
        return response.status, cookie, response.headers.get("Location", await response.text())


def jar(session_id: str) -> dict[str, str]:
    return {"Cookie": f"{login.COOKIE}={session_id}"}


@pytest.mark.parametrize("path", ["/", "/console/app.js", "/console/app.css", "/console/pages/workloads.js",
                                  "/api/v1/workloads", "/api/v1/whoami", "/api/v1/events", "/metrics",
                                  "/no/such/path", "/console/nope.js"])
async def test_nothing_but_the_probes_and_the_form_without_credentials(server: http_app.Server,
                                                                       session: aiohttp.ClientSession,
                                                                       path: str) -> None:
    async with session.get(server.url + path) as response:
        body = await response.text()
        assert response.status == 401, (path, body[:200])
        assert "import" not in body and "export" not in body, "console code leaked"
    for probe in ("/healthz", "/readyz", "/login"):
        async with session.get(server.url + probe) as response:
            assert response.status in (200, 503), probe


async def test_the_page_is_a_script_free_login_form(server: http_app.Server, session: aiohttp.ClientSession) -> None:
    async with session.get(server.url + "/") as response:
        page = await response.text()
        assert response.status == 401 and response.content_type == "text/html"
        csp = response.headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "form-action 'self'" in csp
    assert re.search(r'<form method="post" action="/login">', page)
    assert re.search(r'<input id="token" name="token" type="password"', page)
    assert "<script" not in page and "<style" not in page and not re.search(r"\s(style|on[a-z]+)\s*=", page)
    async with session.get(server.url + "/login") as response:
        assert response.status == 200 and await response.text() == login.PAGE.format(message="")


async def test_a_read_token_logs_in_with_a_session_cookie(server: http_app.Server,
                                                          session: aiohttp.ClientSession) -> None:
    status, cookie, location = await log_in(session, server.url, READ)
    assert (status, location) == (303, "/")
    morsel = cookie[login.COOKIE]
    session_id = morsel.value
    assert session_id and READ not in session_id and len(session_id) >= 40
    assert morsel["httponly"] and morsel["samesite"] == "Strict" and morsel["path"] == "/"
    assert not morsel["secure"], "plain HTTP on loopback: a Secure cookie would never come back"
    async with session.get(server.url + "/", headers=jar(session_id)) as response:
        assert response.status == 200 and '<script type="module" src="/console/app.js">' in await response.text()
    async with session.get(server.url + "/console/app.js", headers=jar(session_id)) as response:
        assert response.status == 200 and response.content_type == "text/javascript"
    async with session.get(server.url + "/metrics", headers=jar(session_id)) as response:
        assert response.status == 200
    async with session.get(server.url + "/api/v1/whoami", headers=jar(session_id)) as response:
        assert await response.json() == {"user": auth.user_of(READ), "role": "read", "auth": "token"}
    async with session.get(server.url + "/login", headers=jar(session_id), allow_redirects=False) as response:
        assert response.status == 303, "already logged in: the form sends the browser to the console"
    # the read role cannot write, with or without the CSRF header
    csrf = {auth.CSRF_HEADER: "1", **jar(session_id)}
    async with session.post(server.url + "/api/v1/policies/default/mode", json={"mode": "Monitor"},
                            headers=csrf) as response:
        assert response.status == 403 and "read role" in (await response.json())["error"]


async def test_cookie_writes_stay_csrf_protected(server: http_app.Server, session: aiohttp.ClientSession) -> None:
    _, cookie, _ = await log_in(session, server.url, WRITE)
    session_id = cookie[login.COOKIE].value
    path = server.url + "/api/v1/workloads/slurm/c0/0/acknowledge"
    async with session.post(path, json={"note": "x"}, headers=jar(session_id)) as response:
        assert response.status == 403 and "CSRF" in (await response.json())["error"]
    async with session.post(path, json={"note": "x"}, headers={
            auth.CSRF_HEADER: "1", "Origin": "https://evil.example", **jar(session_id)}) as response:
        assert response.status == 403 and "cross-origin" in (await response.json())["error"]
    async with session.post(path, data="note=x", headers={
            auth.CSRF_HEADER: "1", "Content-Type": "application/x-www-form-urlencoded", **jar(session_id)}) as response:
        assert response.status == 403 and "JSON body" in (await response.json())["error"]
    async with session.post(path, json={"note": "x"}, headers={
            auth.CSRF_HEADER: "1", "Origin": server.url, **jar(session_id)}) as response:
        assert response.status == 503, "past authentication and CSRF: no audit store in this test"


async def test_wrong_token_forged_and_expired_sessions_are_401(server: http_app.Server,
                                                               session: aiohttp.ClientSession) -> None:
    status, cookie, body = await log_in(session, server.url, "not-a-token-at-all-0123")
    assert status == 401 and login.COOKIE not in cookie
    assert 'id="login-error"' in body and "not accepted" in body and "<form" in body
    async with session.get(server.url + "/api/v1/whoami", headers=jar("forged-" + "A" * 40)) as response:
        assert response.status == 401
    async with session.get(server.url + "/", headers=jar("forged-" + "A" * 40)) as response:
        assert response.status == 401 and "<form" in await response.text()
        cleared = SimpleCookie()
        cleared.load(response.headers["Set-Cookie"])
        assert cleared[login.COOKIE].value == "" and cleared[login.COOKIE]["max-age"] == "0"
    # the session cookie is no bearer token either
    _, cookie, _ = await log_in(session, server.url, READ)
    session_id = cookie[login.COOKIE].value
    async with session.get(server.url + "/api/v1/whoami", headers={"Authorization": f"Bearer {session_id}"}) as r:
        assert r.status == 401
    # 12 hours later the session is over, though the browser still sends the cookie
    sessions = server.app[login.SESSIONS]
    now = sessions.clock()
    sessions.clock = lambda: now + login.SESSION_TTL_S + 1
    async with session.get(server.url + "/api/v1/whoami", headers=jar(session_id)) as response:
        assert response.status == 401 and "expired" in (await response.json())["error"]
    sessions.clock = lambda: now
    async with session.get(server.url + "/api/v1/whoami", headers=jar(session_id)) as response:
        assert response.status == 401, "an expired session is forgotten, not revived"


async def test_logout_needs_the_csrf_header_and_ends_the_session(server: http_app.Server,
                                                                 session: aiohttp.ClientSession) -> None:
    _, cookie, _ = await log_in(session, server.url, READ)
    session_id = cookie[login.COOKIE].value
    async with session.post(server.url + "/logout", headers=jar(session_id)) as response:
        assert response.status == 403, "a cross-site form must not log the user out"
    async with session.get(server.url + "/api/v1/whoami", headers=jar(session_id)) as response:
        assert response.status == 200
    async with session.post(server.url + "/logout", headers={auth.CSRF_HEADER: "1", **jar(session_id)}) as response:
        assert response.status == 200
        cleared = SimpleCookie()
        cleared.load(response.headers["Set-Cookie"])
        assert cleared[login.COOKIE].value == ""
    async with session.get(server.url + "/api/v1/whoami", headers=jar(session_id)) as response:
        assert response.status == 401, "the server forgot the session, not only the browser"


async def test_tls_cookie_is_secure_and_foreign_logins_are_refused(server: http_app.Server,
                                                                   session: aiohttp.ClientSession) -> None:
    _, cookie, _ = await log_in(session, server.url, READ, **{"X-Forwarded-Proto": "https"})
    assert cookie[login.COOKIE]["secure"]
    status, cookie, body = await log_in(session, server.url, READ, Origin="https://evil.example")
    assert status == 403 and login.COOKIE not in cookie and "another site" in body
    status, cookie, body = await log_in(session, server.url, READ, **{"Sec-Fetch-Site": "cross-site"})
    assert status == 403 and login.COOKIE not in cookie and "another site" in body
    # what Chromium sends for the form itself under Referrer-Policy: no-referrer
    status, cookie, _ = await log_in(session, server.url, READ, Origin="null", **{"Sec-Fetch-Site": "same-origin"})
    assert status == 303 and cookie[login.COOKIE].value


async def test_reviewed_tokens_log_in_with_the_reviews_role(server: http_app.Server,
                                                            session: aiohttp.ClientSession) -> None:
    status, cookie, _ = await log_in(session, server.url, REVIEWED)
    assert status == 303
    session_id = cookie[login.COOKIE].value
    async with session.get(server.url + "/api/v1/whoami", headers=jar(session_id)) as response:
        assert await response.json() == {"user": "system:serviceaccount:ops:viewer", "role": "read",
                                         "auth": "kubernetes"}
    # the review is not repeated for a session: it ends sooner than a token file's
    sessions = server.app[login.SESSIONS]
    now = sessions.clock()
    sessions.clock = lambda: now + login.REVIEWED_SESSION_TTL_S + 1
    async with session.get(server.url + "/api/v1/whoami", headers=jar(session_id)) as response:
        assert response.status == 401


async def test_failed_logins_are_throttled(server: http_app.Server, session: aiohttp.ClientSession) -> None:
    for _ in range(login.LOGIN_FAILURES):
        status, _, _ = await log_in(session, server.url, "wrong-token-0123456789")
        assert status == 401
    status, cookie, body = await log_in(session, server.url, READ)
    assert status == 429 and login.COOKIE not in cookie and "Too many" in body, "even the right token waits"
