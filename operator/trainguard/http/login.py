"""Browser sessions for the console: a login form that needs no script, and the session cookie.

Why: with ``--http-token-file`` (or the operator's TokenReview) every path but the probes needs
credentials, the console's own code included; a browser cannot attach an ``Authorization`` header
to a page load, an ES module import or an ``EventSource``, but it does send a cookie. So:

- Without credentials ``GET /`` answers 401 whose body is ``page()``: a static HTML form (no
  script, no inline style: the strict CSP stays) that POSTs the token, form-encoded, to ``/login``.
- A token that the token file (or the reviewer) accepts gets a session: an opaque random id
  (``secrets.token_urlsafe(32)``, never the token) in the cookie ``trainguard_session``
  (``HttpOnly; SameSite=Strict; Path=/``, plus ``Secure`` when the request came over TLS or with
  ``X-Forwarded-Proto: https``), mapped here, in memory, to the caller's principal (user and
  role, the review's role in the operator). The session lasts ``SESSION_TTL_S`` (12 h) from the
  login, not sliding, then the browser logs in again; one from a Kubernetes-reviewed token lasts
  ``REVIEWED_SESSION_TTL_S`` (1 h). Sessions live in this process only: a
  restart or another replica asks for the token again.
- A wrong token: 401 with the form and a message. Failed logins are counted per client address;
  more than ``LOGIN_FAILURES`` in ``LOGIN_WINDOW_S`` answer 429 until the window passes (tokens
  are compared as SHA-256 digests with ``hmac.compare_digest`` in any case).
- ``POST /logout`` (with the API's CSRF header) forgets the session and clears the cookie.

This module holds the state and the page; ``http.auth`` applies them in its middleware.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import html
import secrets
import time
from collections.abc import Callable
from typing import Final

from aiohttp import web

from trainguard.http.principal import Principal

COOKIE: Final = "trainguard_session"
LOGIN_PATH: Final = "/login"
LOGOUT_PATH: Final = "/logout"
SESSION_TTL_S: Final = 12 * 3600.0
REVIEWED_SESSION_TTL_S: Final = 3600.0
"""A session from a Kubernetes-reviewed token keeps the role the review gave at login (the token
is not kept, so it cannot be reviewed again): one hour bounds how long a revoked RoleBinding or
token still works in a browser."""
MAX_SESSIONS: Final = 10_000
"""A bound on memory: past it the oldest session is dropped (its browser logs in again)."""
LOGIN_FAILURES: Final = 10
LOGIN_WINDOW_S: Final = 60.0

Clock = Callable[[], float]


@dataclasses.dataclass(frozen=True)
class Session:
    principal: Principal
    expires: float


class Sessions:
    """Session id -> principal, with an absolute expiry. Ids are kept as SHA-256 digests, so a
    lookup compares digests of random ids and the table itself holds nothing a cookie could be
    forged from."""

    def __init__(self, *, ttl: float = SESSION_TTL_S, clock: Clock = time.monotonic) -> None:
        self.ttl = ttl
        self.clock = clock
        self._table: dict[bytes, Session] = {}

    def __len__(self) -> int:
        return len(self._table)

    @staticmethod
    def _key(session_id: str) -> bytes:
        return hashlib.sha256(session_id.encode()).digest()

    def open(self, principal: Principal) -> str:
        """A new session for ``principal``; returns the id for the cookie."""
        now = self.clock()
        ttl = min(self.ttl, REVIEWED_SESSION_TTL_S) if principal.auth == "kubernetes" else self.ttl
        for key in [k for k, s in self._table.items() if s.expires <= now]:
            del self._table[key]
        while len(self._table) >= MAX_SESSIONS:
            del self._table[next(iter(self._table))]
        session_id = secrets.token_urlsafe(32)
        self._table[self._key(session_id)] = Session(principal, now + ttl)
        return session_id

    def lookup(self, session_id: str) -> Principal | None:
        """The principal of a live session; None for an unknown, forged or expired id."""
        if not session_id or len(session_id) > 100:
            return None
        key = self._key(session_id)
        found = self._table.get(key)
        if found is None:
            return None
        if found.expires <= self.clock():
            del self._table[key]
            return None
        return found.principal

    def close(self, session_id: str) -> None:
        self._table.pop(self._key(session_id), None)


SESSIONS: Final = web.AppKey("sessions", Sessions)
"""The application's sessions (set by ``http.api.install``; tests reach them to age a session)."""


class Limiter:
    """Failed logins per client address in a sliding window."""

    def __init__(self, *, limit: int = LOGIN_FAILURES, window: float = LOGIN_WINDOW_S,
                 clock: Clock = time.monotonic) -> None:
        self.limit, self.window, self.clock = limit, window, clock
        self._failures: dict[str, collections.deque[float]] = {}

    def _recent(self, client: str) -> collections.deque[float]:
        now = self.clock()
        failures = self._failures.setdefault(client, collections.deque())
        while failures and failures[0] <= now - self.window:
            failures.popleft()
        return failures

    def blocked(self, client: str) -> bool:
        blocked = len(self._recent(client)) >= self.limit
        if not self._failures[client]:
            del self._failures[client]
        return blocked

    def failed(self, client: str) -> None:
        if len(self._failures) > MAX_SESSIONS:  # many addresses: forget the quiet ones
            for quiet in [c for c, f in self._failures.items() if not f or f[-1] <= self.clock() - self.window]:
                del self._failures[quiet]
        self._recent(client).append(self.clock())


PAGE: Final = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Trainguard: log in</title>
</head>
<body>
<main>
<h1>Trainguard</h1>
{message}<form method="post" action="/login">
<p><label for="token">Access token</label><br>
<input id="token" name="token" type="password" autocomplete="current-password" spellcheck="false" required autofocus>
</p>
<p><button id="login" type="submit">Log in</button></p>
</form>
<p>The token is sent once; the server then keeps a session for this browser (a cookie, 12 hours).</p>
</main>
</body>
</html>
"""


def page(status: int, message: str = "", **headers: str) -> web.Response:
    """The login form as an HTML answer with ``status``; ``message`` (plain text) above it."""
    shown = f'<p id="login-error" role="alert">{html.escape(message)}</p>\n' if message else ""
    return web.Response(status=status, text=PAGE.format(message=shown), content_type="text/html",
                        headers={"Cache-Control": "no-store", **headers})


def is_tls(request: web.Request) -> bool:
    """Whether the browser reached us over TLS: directly, or through a proxy that says so."""
    forwarded = request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip().lower()
    return request.secure or forwarded == "https"


def set_cookie(response: web.StreamResponse, request: web.Request, session_id: str) -> None:
    response.set_cookie(COOKIE, session_id, path="/", httponly=True, samesite="Strict", secure=is_tls(request),
                        max_age=None)


def clear_cookie(response: web.StreamResponse, request: web.Request) -> None:
    response.set_cookie(COOKIE, "", path="/", httponly=True, samesite="Strict", secure=is_tls(request),
                        max_age=0, expires="Thu, 01 Jan 1970 00:00:00 GMT")
