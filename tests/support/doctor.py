"""Running ``trainguard doctor`` in a test: in this process, with only the given settings, its
one JSON object parsed and checked against the contract."""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from trainguard.cli import main as cli_main


@dataclass(frozen=True)
class DoctorRun:
    code: int
    checks: list[dict[str, Any]]

    def status(self, name: str) -> str:
        return self.check(name)["status"]

    def check(self, name: str) -> dict[str, Any]:
        found = [c for c in self.checks if c["name"] == name]
        assert found, f"no check {name!r} in {[c['name'] for c in self.checks]}"
        return found[0]

    def failed(self) -> list[str]:
        return [c["name"] for c in self.checks if c["status"] == "fail"]


def run_doctor(monkeypatch: pytest.MonkeyPatch, *args: str, env: Mapping[str, str] | None = None) -> DoctorRun:
    """``trainguard doctor --format json ARGS`` in this process, with only ``env`` as settings."""
    for name in list(os.environ):
        if name.startswith(("TRAINGUARD_", "SLURM_")):
            monkeypatch.delenv(name)
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli_main.main(["doctor", "--format", "json", "--check-timeout", "20", *args])
    lines = out.getvalue().splitlines()
    assert len(lines) == 1, f"expected one JSON object, got {out.getvalue()!r}"
    report = json.loads(lines[0])
    assert set(report) == {"checks"}
    for check in report["checks"]:
        assert check["status"] in ("ok", "warn", "fail") and check["name"] and check["message"]
    return DoctorRun(code, report["checks"])


@dataclass(frozen=True)
class BrokenCluster:
    env: dict[str, str]
    """SLURM_CONF (and PATH for a cluster from a root) of the JobRequeue=0 cluster."""
