"""Who may read and who may change: bearer tokens, roles, CSRF and the security headers.

Rules (docs/api.md "Authentication"):

- ``--http-token-file FILE``: one token per line, optionally followed by a space and a role, ``read``
  (the default) or ``write``; blank lines and ``#`` comments are skipped. With a token file, every path
  except ``/healthz``, ``/readyz`` and the login form (``/login``, which serves no data) answers 401
  without a valid ``Authorization: Bearer TOKEN`` or the session cookie of a login (``http.login``:
  browsers cannot put a header on a page load, a module import or an ``EventSource``). The console's
  static code is no exception.
- Without a token file the server must be bound to a loopback address (the default
  ``127.0.0.1:8080``); every caller there is the local user with the write role. Binding elsewhere
  without tokens is refused at start (``check_exposure``): an API that can switch a policy to Action
  is not served to the network without authentication.
- Mutating calls (POST) need the write role (else 403) and are CSRF-protected, whether the caller
  came with a bearer token or a session cookie: they must carry the
  header ``X-Trainguard-Request: 1`` and a JSON body, and an ``Origin`` header, when present, must be
  the server's own. A browser sends a custom header cross-site only after a CORS preflight, which
  this server never grants, so another site cannot make a logged-in browser switch a policy.
- Every response carries the security headers (CSP ``default-src 'self'`` without inline scripts,
  ``frame-ancestors 'none'``, nosniff, no referrer): the console loads nothing from elsewhere, which
  also suits air-gapped clusters.

A caller is named in the audit log by ``Principal.user``: ``token:`` plus the first 12 hex digits of
the token's SHA-256 (the token itself is never written anywhere), or ``local``.
"""

from __future__ import annotations

import contextvars
import dataclasses
import hashlib
import hmac
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

from aiohttp import web
from aiohttp.typedefs import Middleware

from trainguard.http import login
from trainguard.http.principal import LOCAL, ROLES, Principal

OPEN_PATHS: Final = frozenset({"/healthz", "/readyz"})
"""Probes: the kubelet sends no token."""
CONSOLE_PAGE: Final = "/"
"""The console's page: without credentials it answers 401 with the login form as the body
(``http.login``), so that a browser shows the form; every other path answers a JSON 401."""
CSRF_HEADER: Final = "X-Trainguard-Request"
MUTATING: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})
READ_ONLY_POSTS: Final = frozenset({"/api/v1/backtest"})
"""POSTs that change nothing (a body too large for a query string): the read role may call them;
the CSRF check still applies."""

SECURITY_HEADERS: Final = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
                               "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


class Forbidden(Exception):
    """An authenticated caller without even the read role (a 403 with this message)."""


class ReviewUnavailable(Exception):
    """The token cannot be verified right now (the Kubernetes API does not answer): a 503."""


Reviewer = Callable[[str], Awaitable[Principal | None]]
"""An external check of a bearer token: its principal, None for an unknown token; may raise
``Forbidden`` or ``ReviewUnavailable``. The operator's is Kubernetes TokenReview +
SubjectAccessReview (``k8s/review.py``)."""


class TokenFileError(ValueError):
    """A token file that cannot be used; the message names the file and line (never the token)."""


@dataclasses.dataclass(frozen=True)
class TokenBook:
    """The tokens of a token file: SHA-256 digest -> principal (tokens are compared as digests)."""

    entries: dict[bytes, Principal]

    def lookup(self, token: str) -> Principal | None:
        digest = hashlib.sha256(token.encode()).digest()
        for known, principal in self.entries.items():
            if hmac.compare_digest(known, digest):
                return principal
        return None


def user_of(token: str) -> str:
    return "token:" + hashlib.sha256(token.encode()).hexdigest()[:12]


def parse_tokens(text: str, origin: str = "<tokens>") -> TokenBook:
    entries: dict[bytes, Principal] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) > 2:
            raise TokenFileError(f"{origin}:{number}: expected 'TOKEN' or 'TOKEN read|write'")
        role = parts[1] if len(parts) == 2 else "read"
        if role not in ROLES:
            raise TokenFileError(f"{origin}:{number}: unknown role {role!r} (expected read or write)")
        token = parts[0]
        if len(token) < 16:
            raise TokenFileError(f"{origin}:{number}: token too short (at least 16 characters)")
        entries[hashlib.sha256(token.encode()).digest()] = Principal(
            user=user_of(token), role="write" if role == "write" else "read", auth="token")
    if not entries:
        raise TokenFileError(f"{origin}: no tokens in the file")
    return TokenBook(entries)


def load_tokens(path: Path) -> TokenBook:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenFileError(f"--http-token-file: cannot read {path}: {exc}") from exc
    return parse_tokens(text, str(path))


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and names that resolve only to loopback (``localhost``)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(str(info[4][0])).is_loopback for info in infos)


def check_exposure(host: str, tokens: TokenBook | None, reviewer: Reviewer | None = None) -> None:
    """Refuse to serve the API to the network without authentication (ValueError, one line)."""
    if tokens is None and reviewer is None and not is_loopback(host):
        raise ValueError(f"refusing to serve the HTTP API on {host} without authentication: pass "
                         "--http-token-file FILE (bearer tokens) or bind to 127.0.0.1")


def _error(status: int, message: str, **headers: str) -> web.Response:
    return web.json_response({"error": message, "status": status}, status=status, headers=headers or None)


_PRINCIPAL: contextvars.ContextVar[Principal | None] = contextvars.ContextVar("trainguard_principal", default=None)
"""The caller of the request being handled (set by the middleware; each request runs in its own task)."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def middleware(tokens: TokenBook | None, reviewer: Reviewer | None = None,
               sessions: login.Sessions | None = None, limiter: login.Limiter | None = None) -> Middleware:
    """Authentication, roles and CSRF for every path but the probes and the login form. A caller
    proves who it is with ``Authorization: Bearer TOKEN`` or with the session cookie of a login
    (``http.login``); a bearer token is looked up in the token file first, then (in the operator)
    reviewed by ``reviewer``."""
    sessions = sessions if sessions is not None else login.Sessions()
    limiter = limiter if limiter is not None else login.Limiter()

    async def identify(token: str) -> Principal | None:
        found = tokens.lookup(token) if tokens is not None else None
        if found is None and reviewer is not None:
            found = await reviewer(token)
        return found

    async def log_in(request: web.Request) -> web.StreamResponse:
        if request.method == "GET":
            return _see_other() if _session_of(request, sessions) else login.page(200)
        if request.method != "POST":
            return _error(405, "the login form takes GET or POST")
        if _cross_site_form(request):
            return login.page(403, "This form was sent from another site.")
        client = request.remote or "?"
        if limiter.blocked(client):
            return login.page(429, "Too many failed logins: wait a minute and try again.", **{"Retry-After": "60"})
        form = await request.post()
        token = form.get("token")
        token = token.strip() if isinstance(token, str) else ""
        try:
            found = await identify(token) if token else None
        except Forbidden as exc:
            return login.page(403, str(exc))
        except ReviewUnavailable as exc:
            return login.page(503, f"Cannot verify the token now: {exc}")
        if found is None:
            limiter.failed(client)
            return login.page(401, "That token was not accepted.")
        response = _see_other()
        login.set_cookie(response, request, sessions.open(found))
        return response

    async def log_out(request: web.Request) -> web.StreamResponse:
        if request.method != "POST":
            return _error(405, "log out with POST")
        problem = csrf_problem(request)
        if problem:
            return _error(403, problem)
        session_id = request.cookies.get(login.COOKIE)
        if session_id:
            sessions.close(session_id)
        response = web.json_response({"logged_out": True})
        login.clear_cookie(response, request)
        return response

    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN_PATHS:
            return await handler(request)
        if tokens is None and reviewer is None:
            principal = LOCAL
            if request.path in (login.LOGIN_PATH, login.LOGOUT_PATH):
                return _see_other() if request.method == "GET" else web.json_response({"logged_out": True})
        elif request.path == login.LOGIN_PATH:
            return await log_in(request)
        elif request.path == login.LOGOUT_PATH:
            return await log_out(request)
        else:
            header = request.headers.get("Authorization", "")
            scheme, _, value = header.partition(" ")
            if header:
                if scheme.lower() != "bearer" or not value.strip():
                    return _unauthenticated(request, "authentication required: send 'Authorization: Bearer TOKEN'")
                try:
                    found = await identify(value.strip())
                except Forbidden as exc:
                    return _error(403, str(exc))
                except ReviewUnavailable as exc:
                    return _error(503, f"cannot verify the token now: {exc}")
                if found is None:
                    return _error(401, "invalid bearer token", **{"WWW-Authenticate": 'Bearer error="invalid_token"'})
            else:
                found = _session_of(request, sessions)
                if found is None:
                    message = ("session expired or unknown: log in again" if request.cookies.get(login.COOKIE)
                               else "authentication required: log in at /login or send 'Authorization: Bearer TOKEN'")
                    return _unauthenticated(request, message)
            principal = found
        if request.method in MUTATING:
            if not principal.can_write and request.path not in READ_ONLY_POSTS:
                return _error(403, f"{principal.user} has the read role; this call needs the write role")
            problem = csrf_problem(request)
            if problem:
                return _error(403, problem)
        _PRINCIPAL.set(principal)
        return await handler(request)

    return authenticate


def _see_other() -> web.Response:
    """303 to the console's page (after a login, or a login page asked for while logged in)."""
    return web.Response(status=303, headers={"Location": CONSOLE_PAGE, "Cache-Control": "no-store"})


def _session_of(request: web.Request, sessions: login.Sessions) -> Principal | None:
    session_id = request.cookies.get(login.COOKIE)
    return sessions.lookup(session_id) if session_id else None


def _unauthenticated(request: web.Request, message: str) -> web.Response:
    """401: the login form for the console's page (a browser renders it), JSON anywhere else. A
    stale cookie is cleared either way."""
    challenge = {"WWW-Authenticate": 'Bearer realm="trainguard"'}
    if request.method in ("GET", "HEAD") and request.path == CONSOLE_PAGE:
        response = login.page(401, "Your session has ended: log in again."
                              if request.cookies.get(login.COOKIE) else "", **challenge)
    else:
        response = _error(401, message, **challenge)
    if request.cookies.get(login.COOKIE):
        login.clear_cookie(response, request)
    return response


def _cross_site_form(request: web.Request) -> bool:
    """Whether a login POST came from another site's page (login CSRF: logging a browser into the
    attacker's session). Browsers send ``Sec-Fetch-Site``; a form POST under this server's
    ``Referrer-Policy: no-referrer`` carries ``Origin: null``, so only a real foreign origin counts."""
    if request.headers.get("Sec-Fetch-Site", "same-origin") not in ("same-origin", "none"):
        return True
    origin = request.headers.get("Origin")
    return origin is not None and origin != "null" and origin not in _own_origins(request)


def _own_origins(request: web.Request) -> set[str]:
    """The origins a same-site browser sends: the request's scheme, or https behind a TLS proxy."""
    schemes = {request.scheme, "https" if login.is_tls(request) else request.scheme}
    return {f"{scheme}://{request.host}" for scheme in schemes}


def csrf_problem(request: web.Request) -> str:
    """Why a mutating request fails the CSRF check, or "" when it passes."""
    if request.headers.get(CSRF_HEADER) != "1":
        return f"missing CSRF header: mutating calls must send '{CSRF_HEADER}: 1'"
    origin = request.headers.get("Origin")
    if origin is not None and origin not in _own_origins(request):
        return f"cross-origin request refused (Origin {origin!r})"
    if request.body_exists and request.content_type != "application/json":
        return "mutating calls take a JSON body (Content-Type: application/json)"
    return ""


async def security_headers(_: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: the security headers on every response, errors and streams included."""
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)


def principal_of(_: web.Request) -> Principal:
    """The caller of the request being handled (read-only anonymous if the middleware did not run)."""
    return _PRINCIPAL.get() or Principal(user="anonymous", role="read", auth="none")
