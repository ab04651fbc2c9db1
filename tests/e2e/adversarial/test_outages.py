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
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

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
