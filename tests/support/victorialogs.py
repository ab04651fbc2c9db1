"""pytest plugin: a real VictoriaLogs server per test, on a free loopback port.

``victorialogs`` (function scope) yields a started ``VictoriaLogsServer`` with a fresh data
directory and stops it afterwards; ``stop()``/``start()`` restart it on the same port and data
(an outage in the middle of a test). The binary is built once and cached by
``hack/local-victorialogs.sh path`` (``go install``). Tests marked ``victorialogs`` are skipped
only when ``TG_SKIP_VLOGS=1``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from . import services

SCRIPT = services.HACK_DIR / "local-victorialogs.sh"


def binary() -> str:
    """The cached victoria-logs binary (built on first use)."""
    return services.run_script([str(SCRIPT), "path"], timeout=1800).splitlines()[-1].strip()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class VictoriaLogsServer:
    """One victoria-logs process with its own data directory."""

    def __init__(self, exe: str, data: Path, port: int | None = None) -> None:
        self.exe = exe
        self.data = data
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = data.parent / f"victoria-logs-{self.port}.log"

    def start(self, timeout: float = 60) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        with open(self._log, "ab") as log:
            self._proc = subprocess.Popen(
                [self.exe, f"-storageDataPath={self.data}", f"-httpListenAddr=127.0.0.1:{self.port}",
                 "-loggerLevel=WARN"], stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"victoria-logs exited at start: {self._log.read_text()[-2000:]}")
            with contextlib.suppress(OSError), urllib.request.urlopen(self.url + "/health", timeout=2) as resp:
                if resp.read().strip() == b"OK":
                    return
            time.sleep(0.05)
        raise RuntimeError(f"victoria-logs did not answer /health within {timeout} s")

    def stop(self) -> None:
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None


@pytest.fixture
def victorialogs(tmp_path: Path) -> Iterator[VictoriaLogsServer]:
    """A started VictoriaLogs server for one test, stopped afterwards."""
    if os.environ.get("TG_SKIP_VLOGS") == "1":
        pytest.skip("TG_SKIP_VLOGS=1")
    try:
        exe = binary()
    except services.ServiceError as exc:
        pytest.fail(f"building VictoriaLogs: {exc}", pytrace=False)
    server = VictoriaLogsServer(exe, tmp_path / "vlogs-data")
    server.start()
    try:
        yield server
    finally:
        server.stop()
