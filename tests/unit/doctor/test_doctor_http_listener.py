"""`trainguard doctor` fails an HTTP listener that `trainguard run` refuses (0.0.0.0 without tokens, a token
shorter than 16 characters, a token file that cannot be read), with run's own reason: both ask the one rule
(``http.api.mount``). Before, doctor passed them and run then refused to start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainguard.cli import main

TRAINGUARD = Path(sys.executable).with_name("trainguard")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("TRAINGUARD_") or name == "SLURM_JWT":
            monkeypatch.delenv(name)
    monkeypatch.setenv("TRAINGUARD_HOME", str(tmp_path / "home"))


def _doctor_http(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, str]]:
    code = main.main(["doctor", "--format", "json", "--check-timeout", "5", *argv])
    checks = json.loads(capsys.readouterr().out)["checks"]
    found = [c for c in checks if c["name"] == "http"]
    assert len(found) == 1, checks
    return code, found[0]


def _run_refuses(tmp_path: Path, *argv: str) -> str:
    """What `trainguard run` says when it refuses these HTTP settings (it exits 2 before watching anything)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINGUARD_", "SLURM_"))}
    conf = tmp_path / "slurm.conf"
    conf.write_text("")
    env["SLURM_CONF"] = str(conf)
    done = subprocess.run([str(TRAINGUARD), "run", "--scheduler", "slurm-local", "--db",
                           f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}", *argv],
                          env=env, capture_output=True, text=True, timeout=120, check=False, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    return done.stderr.strip().splitlines()[-1]


def _tokens(tmp_path: Path, text: str) -> str:
    path = tmp_path / "tokens"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("case", ["no-tokens", "short-token", "missing-file"])
def test_doctor_fails_what_run_refuses_with_runs_reason(case: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--http-listen", "0.0.0.0:0"]
    if case == "short-token":
        argv += ["--http-token-file", _tokens(tmp_path, "tooshort write\n")]
    elif case == "missing-file":
        argv += ["--http-token-file", str(tmp_path / "absent")]
    code, check = _doctor_http(capsys, *argv)
    assert code == 1
    assert check["status"] == "fail", check
    assert check["message"].startswith("trainguard run would refuse to start: ")
    reason = check["message"].removeprefix("trainguard run would refuse to start: ")
    refused = _run_refuses(tmp_path, *argv)
    assert refused.endswith(reason), (refused, reason)


def test_doctor_passes_a_listener_run_accepts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tokens = _tokens(tmp_path, "a-token-of-20-chars-x write\n")
    _, check = _doctor_http(capsys, "--http-listen", "0.0.0.0:8080", "--http-token-file", tokens)
    assert check["status"] == "ok", check
    assert check["message"] == f"0.0.0.0:8080: console, API and /metrics with bearer tokens from {tokens}"
    _, loopback = _doctor_http(capsys)
    assert loopback["status"] == "ok" and loopback["message"].startswith("127.0.0.1:8080: ")
    _, off = _doctor_http(capsys, "--http-listen", "off")
    assert off["status"] == "ok" and off["message"].startswith("off: ")
