"""The ``http`` check: would ``trainguard run`` accept its HTTP listener settings?

``run`` refuses to start on ``--http-listen 0.0.0.0:8080`` without ``--http-token-file`` (the API and
the console would be open to the network), on a token file it cannot read, and on a token shorter
than 16 characters. Doctor passed all three while ``run`` then refused. This check asks the very
function ``run`` asks before it serves (``http.api.mount``, with run's arguments), so the rule has one
copy and doctor can never pass what ``run`` refuses. Nothing is bound: the port may be in use by the
running instance doctor is checking.
"""

from __future__ import annotations

from pathlib import Path

from trainguard import health as health_mod
from trainguard.doctor import report
from trainguard.http import api as http_api
from trainguard.http import app as http_app

NAME = "http"


def check(listen: str, token_file: Path | None) -> report.Check:
    """``http``: ok with what would be served and how it is protected, or fail with ``run``'s own reason."""
    try:
        http_api.mount(http_api.Fixed(), health_mod.Health(), listen=listen, token_file=token_file,
                       allow_action=False, operator=False)
        address = http_app.parse_listen(listen)
    except ValueError as exc:  # auth.TokenFileError is one too
        return report.fail(NAME, f"trainguard run would refuse to start: {exc}",
                           "bind --http-listen to 127.0.0.1 (or 'off'), or give --http-token-file FILE with "
                           "tokens of at least 16 characters, one per line")
    if address is None:
        return report.ok(NAME, "off: no console, API or /metrics (--http-listen off)")
    host, port = address
    guard = f"bearer tokens from {token_file}" if token_file is not None else "no tokens (loopback only)"
    return report.ok(NAME, f"{host}:{port}: console, API and /metrics with {guard}")
