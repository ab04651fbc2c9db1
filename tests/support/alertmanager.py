"""pytest plugin: a real Alertmanager (Debian's 0.25) routing to a webhook receiver of the test, and promtool.

``hack/local-alertmanager.sh`` installs the packages and runs the daemon from a state directory of our own
on the slot's port (``TG_AM_DIR``, ``TG_AM_PORT``: tests/support/workers.py); the ``alertmanager`` fixture
starts a loopback HTTP receiver (the receiving end of Alertmanager's webhook: what Alertmanager posts is
recorded as it arrives), brings Alertmanager up routing every alert to it, and stops it afterwards. Tests
marked ``alertmanager`` are skipped only when ``TG_SKIP_ALERTMANAGER=1``.

Registered in tests/conftest.py:  pytest_plugins = [..., "tests.support.alertmanager"]
"""

from __future__ import annotations

import dataclasses
import http.server
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from . import services

SCRIPT = services.HACK_DIR / "local-alertmanager.sh"


def tools() -> dict[str, str]:
    """``{"alertmanager": PATH, "promtool": PATH}``, installed on first use."""
    out = services.run_script([str(SCRIPT), "path"], timeout=900)
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line and not line.startswith("["))


@dataclasses.dataclass
class Alertmanager:
    url: str
    received: list[dict[str, Any]]

    def post_alerts(self, alerts: list[dict[str, Any]]) -> None:
        """Post alerts to its API v2, as Prometheus does."""
        import urllib.request

        request = urllib.request.Request(f"{self.url}/api/v2/alerts", data=json.dumps(alerts).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200

    def wait_for(self, alertname: str, timeout: float = 60) -> dict[str, Any]:
        """The first webhook notification naming ``alertname``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for body in list(self.received):
                if any(a.get("labels", {}).get("alertname") == alertname for a in body.get("alerts", [])):
                    return body
            time.sleep(0.1)
        raise AssertionError(f"no notification for {alertname} within {timeout:g} s; got {self.received}")


def _receiver() -> tuple[http.server.ThreadingHTTPServer, list[dict[str, Any]]]:
    received: list[dict[str, Any]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            received.append(json.loads(self.rfile.read(length) or b"{}"))
            self.send_response(200)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, name="alert receiver", daemon=True).start()
    return server, received


@pytest.fixture
def alertmanager() -> Iterator[Alertmanager]:
    """Alertmanager on this slot's port, routing every alert at once to a receiver of this test."""
    if os.environ.get("TG_SKIP_ALERTMANAGER") == "1":
        pytest.skip("TG_SKIP_ALERTMANAGER=1")
    server, received = _receiver()
    state = Path(os.environ.get("TG_AM_DIR") or services.REPO_ROOT / ".local" / "alertmanager")
    try:
        services.run_script([str(SCRIPT), "up", f"http://127.0.0.1:{server.server_address[1]}/alerts"], timeout=900)
        (state / services.STARTED_MARKER).touch()
        env = services.read_env_file(state / "env")
        yield Alertmanager(env["TG_ALERTMANAGER_URL"], received)
    finally:
        services.script_succeeds([str(SCRIPT), "down", "--wipe"])  # its notification log would mute a rerun
        server.shutdown()
        server.server_close()
