"""The real ``trainguard operator`` as a subprocess, for the e2e tests of the Kubernetes shell.

It runs with the ServiceAccount ``trainguard-system/trainguard`` of ``manifests/base`` (a token from
the TokenRequest API in its own kubeconfig), so a permission missing from ``manifests/base/rbac.yaml``
fails the tests, and with the local Slurm cluster's client environment (``SLURM_CONF`` and the
cluster's ``SLURM_JWT``: the scontrol-with-JWT path a Slinky deployment uses).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support import kube

REPO_ROOT = Path(__file__).resolve().parents[3]
TRAINGUARD = Path(sys.executable).with_name("trainguard")
STOP_TIMEOUT_S = 45.0


class OperatorProcess:
    """One ``trainguard operator`` subprocess and its log."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.args = args
        self.env = env
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        # A free port for /healthz, /readyz, /metrics unless the test chose one: several operators
        # (and runners) of one session must not collide on the default 127.0.0.1:8080.
        listen = [] if any(a.startswith("--http-listen") for a in self.args) else ["--http-listen", "127.0.0.1:0"]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [str(TRAINGUARD), "operator", *self.args, *listen], env=self.env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, cwd=REPO_ROOT,
            )

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after STOP_TIMEOUT_S; the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return self.proc.returncode

    def tail(self, lines: int = 60) -> str:
        if not self.log.is_file():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, f"{done.args} failed: {done.stderr}"
    return done.stdout


def get_json(api: kube.LocalKube, *args: str) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(ok(api.kubectl("get", *args, "-o", "json")))
    return decoded


def poll(what: str, probe: Callable[[], Any], timeout: float, diagnose: Callable[[], str]) -> Any:
    """Call ``probe`` until it returns something truthy; fail with ``diagnose()`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"no {what} within {timeout:.0f} s; last: {last!r}\n{diagnose()}")


def operator_env(kubeconfig: Path, slurm_env: dict[str, str], home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "KUBECONFIG"))}
    env.update({k: v for k, v in slurm_env.items() if k.startswith(("SLURM_", "SLURMRESTD_", "TG_SLURM"))})
    env.update({"KUBECONFIG": str(kubeconfig), "TRAINGUARD_HOME": str(home), "HOME": str(home)})
    for name in [name for name in env if name.startswith("TRAINGUARD_")]:
        env.pop(name)  # the test's flags alone configure the operator
    env["TRAINGUARD_HOME"] = str(home)
    return env
