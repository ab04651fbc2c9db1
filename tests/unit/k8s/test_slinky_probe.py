"""slurm-operator's version as doctor reads it: from the Deployment's image tag, else its version label,
judged against the first release with the cordon -> drain sync (v1.0.0-rc1)."""

from __future__ import annotations

from typing import Any

import pytest

from trainguard.k8s import slinky_probe

pytestmark = pytest.mark.unit


def _deployment(*images: str, label: str | None = None) -> dict[str, Any]:
    labels = {slinky_probe.VERSION_LABEL: label} if label else {}
    return {"metadata": {"labels": labels},
            "spec": {"template": {"spec": {"containers": [{"name": f"c{i}", "image": image}
                                                          for i, image in enumerate(images)]}}}}


@pytest.mark.parametrize(("text", "parsed"), [
    ("v1.0.1", (1, 0, 1, ())),
    ("1.0.1", (1, 0, 1, ())),
    ("1.0.0-rc1", (1, 0, 0, ("rc1",))),
    ("v1.1.0-rc1+build.5", (1, 1, 0, ("rc1",))),
    ("0.4.1", (0, 4, 1, ())),
    ("latest", None),
    ("1.0", None),
    ("", None),
])
def test_parse_version(text: str, parsed: Any) -> None:
    assert slinky_probe.parse_version(text) == parsed


@pytest.mark.parametrize(("text", "synced"), [
    ("1.0.0-rc1", True), ("v1.0.0", True), ("1.0.1", True), ("1.2.3", True), ("2.0.0-alpha", True),
    ("1.0.0-beta.2", False), ("0.4.1", False), ("v0.3.0", False), ("0.99.99", False),
])
def test_cordon_sync_starts_at_1_0_0_rc1(text: str, synced: bool) -> None:
    version = slinky_probe.parse_version(text)
    assert version is not None
    assert slinky_probe.has_cordon_sync(version) is synced


@pytest.mark.parametrize(("image", "tag", "name"), [
    ("ghcr.io/slinkyproject/slurm-operator:1.0.1", "1.0.1", "slurm-operator"),
    ("registry.local:5000/slinky/slurm-operator:v1.0.0@sha256:abc", "v1.0.0", "slurm-operator"),
    ("registry.local:5000/slurm-operator", None, "slurm-operator"),
    ("slurm-operator@sha256:abc", None, "slurm-operator"),
])
def test_image_tag_and_name(image: str, tag: str | None, name: str) -> None:
    assert slinky_probe.image_tag(image) == tag
    assert slinky_probe.image_name(image) == name


def test_version_prefers_the_operator_image_then_the_label() -> None:
    both = _deployment("sidecar:9.9.9", "ghcr.io/slinkyproject/slurm-operator:1.0.1", label="0.4.0")
    assert slinky_probe.version_of(both) == ("1.0.1", "image ghcr.io/slinkyproject/slurm-operator:1.0.1")
    untagged = _deployment("ghcr.io/slinkyproject/slurm-operator@sha256:abc", label="1.0.0")
    assert slinky_probe.version_of(untagged) == ("1.0.0", f"label {slinky_probe.VERSION_LABEL}")
    assert slinky_probe.version_of(_deployment("slurm-operator:latest")) == ("latest", "image slurm-operator:latest")
    assert slinky_probe.version_of(_deployment("slurm-operator"))[0] is None


def test_judge_version() -> None:
    ok = slinky_probe.judge_version("ns/op", _deployment("slurm-operator:1.0.1"))
    assert (ok.name, ok.status) == ("slinky.version", "ok")
    old = slinky_probe.judge_version("ns/op", _deployment("slurm-operator:0.4.1"))
    assert old.status == "fail" and "predates 1.0.0-rc1" in old.message and old.fix
    assert slinky_probe.judge_version("ns/op", _deployment("slurm-operator:latest")).status == "warn"
    assert slinky_probe.judge_version("ns/op", _deployment("slurm-operator")).status == "warn"
