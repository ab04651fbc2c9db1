"""docs/policy.md documents every spec field and every override key (drift guard)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainguard.policy import model, overrides

DOCS = Path(__file__).resolve().parents[3] / "docs" / "policy.md"


def _leaf_paths(node: dict[str, Any], prefix: str = "") -> list[str]:
    properties = node.get("properties")
    if not properties or prefix.endswith("extraPatterns"):
        return [prefix]
    paths: list[str] = []
    for name, child in properties.items():
        paths.extend(_leaf_paths(child, f"{prefix}.{name}" if prefix else name))
    return paths


def test_every_field_is_documented() -> None:
    text = DOCS.read_text(encoding="utf-8")
    paths = _leaf_paths(model.crd_openapi_schema())
    assert len(paths) > 25
    missing = [path for path in paths if f"| `{path}` |" not in text]
    assert missing == []


def test_every_override_key_is_documented() -> None:
    text = DOCS.read_text(encoding="utf-8")
    missing = [key for key in ["policy", *overrides.SUPPORTED] if f"| `{key}` |" not in text]
    assert missing == []
