"""requirements.lock (the image's pinned runtime dependencies) stays in step with pyproject.toml."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]


def _name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def locked() -> dict[str, str]:
    pins = re.findall(r"^([A-Za-z0-9._-]+)==(\S+) \\\n\s+--hash=sha256:[0-9a-f]{64}$",
                      (REPO / "requirements.lock").read_text(), re.MULTILINE)
    return {_name(name): version for name, version in pins}


def test_every_runtime_dependency_and_the_mysql_extra_is_pinned_with_a_hash() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = {_name(r) for r in project["dependencies"] + project["optional-dependencies"]["mysql"]}
    pins = locked()
    assert wanted <= set(pins), f"not in requirements.lock (run hack/build-image.sh lock): {wanted - set(pins)}"


def test_test_only_packages_stay_out_of_the_image() -> None:
    assert not set(locked()) & {"torch", "numpy", "pytest", "playwright", "lupa", "trainguard"}
