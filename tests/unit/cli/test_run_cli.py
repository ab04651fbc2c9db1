"""`trainguard run` as a user starts it (the installed console script, a subprocess, so not marked
unit): the built-in policy stays Monitor under `--mode action`, and `--once` against a scheduler
that cannot be reached ends with one line and a non-zero exit, not a traceback.

The scheduler here is `slurm-local` with an empty Slurm configuration file, so every Slurm command
fails at once (a missing file would make each one retry for a minute); the real-cluster outage
scenarios, with a controller that does not answer, are in tests/e2e/adversarial/test_outages.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TRAINGUARD = Path(sys.executable).with_name("trainguard")


def run_once(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("squeue") is None:
        pytest.skip("the Slurm client commands are not installed")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINGUARD_", "SLURM_"))}
    conf = tmp_path / "slurm.conf"
    conf.write_text("")
    env["SLURM_CONF"] = str(conf)
    return subprocess.run(
        [str(TRAINGUARD), "run", "--scheduler", "slurm-local", "--once", "--db",
         f"sqlite:///{tmp_path / 'audit.db'}", *argv],
        env=env, capture_output=True, text=True, timeout=120, check=False, stdin=subprocess.DEVNULL,
    )


def test_default_policy_is_monitor_even_with_mode_action(tmp_path: Path) -> None:
    done = run_once(tmp_path, "--mode", "action")
    assert "action switch ON" in done.stderr, done.stderr
    assert "policies {default: Monitor}" in done.stderr, done.stderr


def test_once_against_an_unreachable_scheduler_is_one_line(tmp_path: Path) -> None:
    done = run_once(tmp_path)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("trainguard run: scheduler unreachable: SchedulerError: "), done.stderr


@pytest.mark.parametrize(("flag", "value", "named"), [
    ("--prometheus-hostname-label", "host-name", "--prometheus-hostname-label"),
    ("--prometheus-node-regex", "(node", "--prometheus-node-regex"),
])
def test_a_bad_gpu_metrics_setting_is_named_in_one_line(tmp_path: Path, flag: str, value: str, named: str) -> None:
    done = run_once(tmp_path, "--prometheus-url", "http://127.0.0.1:9", flag, value)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(f"trainguard run: {named}: "), done.stderr
