"""pytest plugin: a private MariaDB server for the audit store suite (MySQL/MariaDB support).

``mariadb_url`` is a session fixture: it installs Debian's ``mariadb-server`` when missing (as
root), initialises a data directory under pytest's temp folder, starts ``mariadbd`` on a free
loopback port with no system defaults, yields the SQLAlchemy URL of the server
(``mysql+aiomysql://root@127.0.0.1:PORT/``) and stops the server at the end. Tests marked
``mariadb`` are skipped only when ``TG_SKIP_MARIADB=1``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _install() -> None:
    if shutil.which("mariadbd") and shutil.which("mariadb-install-db"):
        return
    if os.geteuid() != 0:
        pytest.fail("mariadb-server is not installed (apt-get install mariadb-server), and we are not root")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    policy = Path("/usr/sbin/policy-rc.d")
    added = not policy.exists()
    if added:  # keep the package's init scripts from starting a system server
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
    try:
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, capture_output=True, timeout=600)
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "mariadb-server"],
                       check=True, env=env, capture_output=True, timeout=900)
    finally:
        if added:
            policy.unlink(missing_ok=True)


def _ping(port: int) -> bool:
    done = subprocess.run(["mariadb-admin", "--no-defaults", "-h", "127.0.0.1", "-P", str(port), "-u", "root",
                           "ping"], capture_output=True, timeout=10, check=False)
    return done.returncode == 0


@pytest.fixture(scope="session")
def mariadb_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if os.environ.get("TG_SKIP_MARIADB") == "1":
        pytest.skip("TG_SKIP_MARIADB=1")
    _install()
    base = tmp_path_factory.mktemp("mariadb")
    data = base / "data"
    data.mkdir()
    init = subprocess.run(["mariadb-install-db", "--no-defaults", "--user=root", f"--datadir={data}",
                           "--auth-root-authentication-method=normal", "--skip-test-db"],
                          capture_output=True, text=True, timeout=120, check=False)
    if init.returncode != 0:
        pytest.fail(f"mariadb-install-db failed: {init.stderr[-2000:]}")
    port = _free_port()
    log = base / "error.log"
    server = subprocess.Popen(
        ["mariadbd", "--no-defaults", "--user=root", f"--datadir={data}", f"--socket={base / 'mysqld.sock'}",
         f"--port={port}", "--bind-address=127.0.0.1", f"--pid-file={base / 'mariadb.pid'}",
         f"--log-error={log}", "--skip-log-bin", "--innodb-flush-log-at-trx-commit=0"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _ping(port):
            if server.poll() is not None or time.monotonic() > deadline:
                text = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                pytest.fail(f"mariadbd did not start on 127.0.0.1:{port}: {text}")
            time.sleep(0.2)
        yield f"mysql+aiomysql://root@127.0.0.1:{port}/"
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(timeout=STOP_TIMEOUT_S)
