"""Routes that serve the console's static files (``routes()``), added to ``trainguard.http``'s app.

- ``/`` answers the console's single page (hash routing: ``#/workloads``, ``#/workload/ID`` ...);
  with a token file and no credentials, ``http.auth`` answers 401 with the login form instead
  (``http.login``) and the page is served only once the browser holds a session cookie.
- ``/console/<file>`` answers the page's stylesheet and ES modules, read from the package directory
  ``static/`` and never from a path the request names: only files listed when the routes are built
  are served, so ``..`` or a symlink cannot reach anything else.

Security headers go on every answer: a Content-Security-Policy without inline scripts or styles and
no third-party origin (``default-src 'self'``), no framing, no MIME sniffing, no referrer. The files
are tiny, so they are held in memory once; ``Cache-Control: no-cache`` with an ETag lets a browser
revalidate after an upgrade instead of running a stale module against a newer API. ``/console/``
is behind the same credentials as everything else (the session cookie goes with module imports).
"""

from __future__ import annotations

import hashlib
import mimetypes
from collections.abc import Mapping
from importlib import resources
from typing import Final

from aiohttp import web

STATIC_PREFIX: Final = "/console/"
"""Where the page's modules and stylesheet live (the page itself is ``/``)."""

SECURITY_HEADERS: Final[Mapping[str, str]] = {
    "Content-Security-Policy": "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

_TYPES: Final[Mapping[str, str]] = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}


class Asset:
    """One static file held in memory with its content type and ETag."""

    def __init__(self, name: str, body: bytes) -> None:
        self.name = name
        self.body = body
        suffix = name[name.rfind("."):] if "." in name else ""
        self.content_type = _TYPES.get(suffix) or mimetypes.guess_type(name)[0] or "application/octet-stream"
        self.etag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'

    def response(self, request: web.Request, *, conditional: bool = True) -> web.Response:
        """200 with the body, or 304 when ``conditional`` and the browser holds this version."""
        headers = dict(SECURITY_HEADERS)
        if conditional:
            headers["ETag"] = self.etag
            if request.headers.get("If-None-Match") == self.etag:
                return web.Response(status=304, headers=headers)
        headers["Content-Type"] = self.content_type
        return web.Response(body=self.body, headers=headers)


def load_assets() -> dict[str, Asset]:
    """Every file under the package's ``static/`` directory, by its path relative to it (``app.js``,
    ``pages/overview.js``)."""
    assets: dict[str, Asset] = {}
    root = resources.files("trainguard.console").joinpath("static")
    pending = [(root, "")]
    while pending:
        folder, prefix = pending.pop()
        for entry in folder.iterdir():
            if entry.is_dir():
                pending.append((entry, f"{prefix}{entry.name}/"))
            elif entry.is_file() and not entry.name.startswith("."):
                assets[prefix + entry.name] = Asset(prefix + entry.name, entry.read_bytes())
    return assets


def routes(assets: Mapping[str, Asset] | None = None) -> list[web.RouteDef]:
    """The console's routes: ``GET /`` (the page) and ``GET /console/{name}`` (its files)."""
    files = dict(assets) if assets is not None else load_assets()
    page = files["index.html"]

    async def index(request: web.Request) -> web.Response:
        # always the whole page, never a 304: a login or logout changes what the browser must show
        return page.response(request, conditional=False)

    async def static(request: web.Request) -> web.Response:
        asset = files.get(request.match_info["name"])
        if asset is None:
            raise web.HTTPNotFound(text="no such console file", headers=dict(SECURITY_HEADERS))
        return asset.response(request)

    return [web.get("/", index), web.get(STATIC_PREFIX + "{name:.+}", static)]
