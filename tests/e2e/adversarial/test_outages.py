"""Adversarial: the scheduler goes away and comes back while ``trainguard run`` runs.

The runner uses its own copy of the local cluster's Slurm configuration. "Down" rewrites the copy
so that slurmctld's port is one nobody listens on: every Slurm command of the runner then fails
to connect, exactly as when the controller is stopped, while the cluster itself (and whatever
else the session runs on it) stays up. "Back" restores the real port. Slurm's client commands
read the configuration at each start, so the runner sees both changes without a restart.

Expected, all through the runner's outside contracts (its log, ``--http-listen``, exit codes):
- no traceback in the log, ever;
- exactly one line when the scheduler becomes unreachable and one when it is reachable again;
- ``/readyz`` 503 with the reason while down, 200 once it is back; ``/healthz`` 200 throughout
  (an unreachable scheduler is no reason to restart the runner); ``/metrics`` counts the errors;
- ``run --once`` against the down scheduler: one line on stderr and a non-zero exit.

The same for the audit store: the runner reaches the real PostgreSQL through a TCP forwarder of
this test (``CuttableLink``), which is cut and restored.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy.engine

from tests.e2e import harness
from tests.support.slurm import SlurmCluster

pytestmark = [pytest.mark.e2e, pytest.mark.slurm]

WAIT_S = 120.0


class SwitchableConf:
    """A copy of the cluster's Slurm configuration directory whose controller port can be broken."""

    def __init__(self, cluster: SlurmCluster, directory: Path) -> None:
        source = Path(cluster.env["SLURM_CONF"])
        self.directory = directory / "etc"
        shutil.copytree(source.parent, self.directory)
        self.path = self.directory / source.name
        self.original = source.read_text()
        assert re.search(r"(?m)^SlurmctldPort=\d+$", self.original), "slurm.conf names no SlurmctldPort"
        self.env = {**cluster.env, "SLURM_CONF": str(self.path)}

    def down(self) -> None:
        with socket.socket() as probe:  # a port that was free a moment ago: nobody answers there
            probe.bind(("127.0.0.1", 0))
            dead = probe.getsockname()[1]
        self._write(re.sub(r"(?m)^SlurmctldPort=\d+$", f"SlurmctldPort={dead}", self.original))

    def up(self) -> None:
        self._write(self.original)

    def _write(self, text: str) -> None:
        scratch = self.path.with_suffix(".new")
        scratch.write_text(text)
        scratch.replace(self.path)  # atomic: a command starting meanwhile reads the old or the new file


def get(url: str) -> tuple[int, dict[str, Any] | str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            status, body = response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read().decode()
    try:
        return status, json.loads(body)
    except json.JSONDecodeError:
        return status, body


def wait_for(what: str, probe: Callable[[], Any], runner: harness.Trainguard) -> Any:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"not {what} within {WAIT_S:.0f} s\n--- runner log ---\n{runner.log()}")


def test_scheduler_outage_is_one_line_each_way_and_shows_in_readiness(slurm_cluster: SlurmCluster,
                                                                      tmp_path: Path) -> None:
    conf = SwitchableConf(slurm_cluster, tmp_path)
    runner = harness.Trainguard(slurm_cluster, tmp_path / "runner", mode="monitor", env=conf.env)
    runner.start()
    try:
        base = runner.http_url
        wait_for("ready", lambda: get(base + "/readyz")[0] == 200, runner)

        conf.down()
        _, body = wait_for("unready", lambda: (r := get(base + "/readyz"))[0] == 503 and r, runner)
        assert isinstance(body, dict) and body["ready"] is False
        assert body["scheduler"]["reachable"] is False and body["scheduler"]["last_error"], body
        assert any(reason.startswith("scheduler unreachable since") for reason in body["reasons"]), body
        assert get(base + "/healthz")[0] == 200, "an unreachable scheduler is no liveness failure"
        # several failed rounds, to show they do not each log a line
        wait_for("2 failed calls", lambda: get(base + "/readyz")[1]["scheduler"]["failures"] >= 2, runner)

        conf.up()
        wait_for("ready again", lambda: get(base + "/readyz")[0] == 200, runner)
        _, metrics = get(base + "/metrics")
        assert isinstance(metrics, str)
        errors = re.search(r'^trainguard_dependency_errors_total\{dependency="scheduler"\} (\S+)$', metrics, re.M)
        assert errors is not None and float(errors.group(1)) >= 2, metrics
        assert re.search(r'^trainguard_dependency_reachable\{dependency="scheduler"\} 1\.0$', metrics, re.M)
    finally:
        conf.up()
        code = runner.stop()
    log = runner.log()
    assert code == 0, log
    assert "Traceback" not in log, log
    assert len(re.findall(r"scheduler unreachable: ", log)) == 1, log
    assert len(re.findall(r"scheduler reachable again after ", log)) == 1, log


def test_once_against_a_down_scheduler_is_one_line_and_fails(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    conf = SwitchableConf(slurm_cluster, tmp_path)
    conf.down()
    done = subprocess.run(
        [str(harness.TRAINGUARD), "run", "--scheduler", "slurm-local", "--once", "--db",
         f"sqlite:///{tmp_path / 'audit.db'}"],
        env=conf.env, capture_output=True, text=True, timeout=300, check=False, stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("trainguard run: scheduler unreachable: "), done.stderr


class CuttableLink:
    """A TCP forwarder from a loopback port to the real PostgreSQL that can be cut and restored:
    cut closes the listening socket and every forwarded connection (the runner sees a database
    that went away and refuses connections); restore listens again on the same port."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self._listener: socket.socket | None = None
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self.restore()

    def restore(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            sockets, self._sockets = self._sockets, []
        for sock in [s for s in (listener,) if s is not None] + sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    upstream.close()
                    return
                self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


@pytest.mark.postgres
def test_store_outage_shows_in_readiness_and_is_one_line_each_way(slurm_cluster: SlurmCluster, postgres_url: str,
                                                                  tmp_path: Path) -> None:
    """The audit database (real PostgreSQL) goes away and comes back while the runner runs."""
    url = sqlalchemy.engine.make_url(postgres_url)
    assert url.host and url.port
    link = CuttableLink((url.host, url.port))
    via_link = url.set(host="127.0.0.1", port=link.port).render_as_string(hide_password=False)
    runner = harness.Trainguard(slurm_cluster, tmp_path / "runner", mode="monitor", db_url=via_link)
    runner.start()
    try:
        base = runner.http_url
        wait_for("ready", lambda: get(base + "/readyz")[0] == 200, runner)

        link.cut()
        _, body = wait_for("unready", lambda: (r := get(base + "/readyz"))[0] == 503 and r, runner)
        assert isinstance(body, dict) and body["store"]["reachable"] is False, body
        assert any(reason.startswith("store unreachable since") for reason in body["reasons"]), body
        assert body["scheduler"]["reachable"] is True, "only the store is down"
        assert get(base + "/healthz")[0] == 200
        wait_for("2 failed calls", lambda: get(base + "/readyz")[1]["store"]["failures"] >= 2, runner)

        link.restore()
        wait_for("ready again", lambda: get(base + "/readyz")[0] == 200, runner)
    finally:
        code = runner.stop()
        link.cut()
    log = runner.log()
    assert code == 0, log
    assert "Traceback" not in log, log
    assert len(re.findall(r"store unreachable: ", log)) == 1, log
    assert len(re.findall(r"store reachable again after ", log)) == 1, log
