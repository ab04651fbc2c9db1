"""Shared by the labelled-log suites (tests/data/eval, tests/data/real): labels, one CLI run."""

from __future__ import annotations

import contextlib
import functools
import io
import json
from pathlib import Path
from typing import Any

import yaml

from trainguard.cli import main


def load_labels(directory: Path) -> dict[str, dict[str, Any]]:
    """``labels.yaml`` of a set: file name -> expected reading."""
    loaded: dict[str, dict[str, Any]] = yaml.safe_load((directory / "labels.yaml").read_text(encoding="utf-8"))
    return loaded


@functools.cache
def detect_all(directory: Path) -> dict[str, dict[str, Any]]:
    """One `trainguard detect --format json` run over every labelled file of ``directory``."""
    paths = sorted(str(directory / name) for name in load_labels(directory))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main.main(["detect", "--format", "json", *paths]) == 0
    results = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(results) == len(paths)
    return {Path(r["path"]).name: r for r in results}
