"""Fixtures of the CLI tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No setting leaks in from the environment the tests run in (use with ``pytest.mark.usefixtures``)."""
    for name in list(os.environ):
        if name.startswith("TRAINGUARD_") or name in {"SLURM_JWT", "POD_NAMESPACE"}:
            monkeypatch.delenv(name)
    monkeypatch.setenv("TRAINGUARD_HOME", str(tmp_path / "home"))
