"""The console's files as a browser gets them, on a real socket without a token file (the login
flow is ``test_console_login.py``): the page at ``/``, its modules and stylesheet under
``/console/``, strict security headers (no inline code can run, no third-party origin), ETag
revalidation, and nothing outside the package's ``static/`` directory reachable.

The files themselves are checked for what the CSP would silently break in a browser: an inline
script or style, a ``style=`` attribute, a remote URL, and ES module imports that name a file that
is not shipped."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from importlib import resources
from pathlib import Path

import aiohttp
import pytest

from trainguard import health as health_mod
from trainguard.console import web as console_web
from trainguard.http import app as http_app

pytestmark = pytest.mark.unit

IMPORT_RE = re.compile(r"""^\s*import\s[^;]*?from\s+["'](?P<path>[^"']+)["']""", re.MULTILINE)


@pytest.fixture
async def base_url() -> AsyncIterator[str]:
    server = await http_app.serve(health_mod.Health(), "127.0.0.1:0", routes=console_web.routes())
    assert server is not None
    try:
        yield server.url
    finally:
        await server.stop()


async def test_page_and_assets_with_security_headers(base_url: str) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(base_url + "/") as response:
            page = await response.text()
            assert response.status == 200 and response.content_type == "text/html"
            csp = response.headers["Content-Security-Policy"]
            assert "default-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
            assert response.headers["X-Content-Type-Options"] == "nosniff"
        assert '<script type="module" src="/console/app.js">' in page
        for name, kind in (("app.js", "text/javascript"), ("app.css", "text/css"),
                           ("pages/workload.js", "text/javascript")):
            async with session.get(f"{base_url}/console/{name}") as response:
                assert response.status == 200 and response.content_type == kind, name
                assert "default-src 'self'" in response.headers["Content-Security-Policy"]
                etag = response.headers["ETag"]
            async with session.get(f"{base_url}/console/{name}", headers={"If-None-Match": etag}) as response:
                assert response.status == 304, name


@pytest.mark.parametrize("path", ["/console/nope.js", "/console/../web.py", "/console/%2e%2e/web.py",
                                  "/console/..%2fweb.py", "/console/pages/../../web.py", "/console/"])
async def test_only_shipped_files_are_served(base_url: str, path: str) -> None:
    async with aiohttp.ClientSession() as session, session.get(base_url + path) as response:
        body = await response.text()
        assert response.status == 404, (path, body[:100])
        assert "import" not in body


def _static_files() -> dict[str, str]:
    return {name: asset.body.decode() for name, asset in console_web.load_assets().items()}


def test_files_obey_the_content_security_policy() -> None:
    files = _static_files()
    assert {"index.html", "app.js", "api.js", "ui.js", "app.css"} <= set(files)
    page = files["index.html"]
    assert not re.search(r"<script(?![^>]*\ssrc=)[^>]*>", page), "inline <script> (blocked by the CSP)"
    assert "<style" not in page and not re.search(r"\sstyle\s*=", page), "inline style (blocked by the CSP)"
    assert not re.search(r"\son[a-z]+\s*=", page), "inline event handler (blocked by the CSP)"
    for name, text in files.items():
        remote = re.search(r"(?:src|href)\s*=\s*[\"']?(?:https?:)?//", text)
        assert not remote, f"{name}: remote URL (air-gapped clusters)"
        assert "innerHTML" not in text and "insertAdjacentHTML" not in text, f"{name}: markup from strings"
        assert "eval(" not in text and "new Function" not in text, f"{name}: eval (blocked by the CSP)"
        assert 'setAttribute("style"' not in text, f"{name}: style attribute (blocked by the CSP)"


def test_every_module_import_is_shipped() -> None:
    files = _static_files()
    for name, text in files.items():
        if not name.endswith(".js"):
            continue
        folder = name.rpartition("/")[0]
        for match in IMPORT_RE.finditer(text):
            target = match["path"]
            assert target.startswith("."), f"{name}: bare import {target!r} needs a bundler"
            parts = [p for p in f"{folder}/{target}".split("/") if p and p != "."]
            resolved: list[str] = []
            for part in parts:
                if part == "..":
                    resolved.pop()
                else:
                    resolved.append(part)
            assert "/".join(resolved) in files, f"{name} imports {target!r}, which is not shipped"


def test_static_files_are_package_data() -> None:
    """What the wheel ships (pyproject's package-data globs) covers every file of static/."""
    import tomllib

    root = Path(__file__).resolve().parents[3]
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["trainguard"]
    package = Path(str(resources.files("trainguard")))
    shipped = {p for g in globs for p in package.glob(g)}
    static = {p for p in (package / "console" / "static").rglob("*") if p.is_file()}
    assert static and static <= shipped, sorted(str(p) for p in static - shipped)
