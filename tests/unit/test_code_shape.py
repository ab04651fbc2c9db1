"""The house rule on size, checked: no module over 500 lines and no class over 400 (issue 24).

A module or class past these sizes holds more than one responsibility; the rule is enforced here so
that the split of the engine, the store, the API and the operator does not grow back one line at
a time. Split by responsibility when this fails; never squeeze lines to pass it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "trainguard"
MAX_MODULE_LINES = 500
MAX_CLASS_LINES = 400


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "alembic" not in p.parts or p.name == "env.py")


def test_no_module_is_over_500_lines() -> None:
    over = {str(p.relative_to(PACKAGE)): n for p in _modules()
            if (n := p.read_text(encoding="utf-8").count("\n")) > MAX_MODULE_LINES}
    assert not over, f"modules over {MAX_MODULE_LINES} lines (split by responsibility): {over}"


def test_no_class_is_over_400_lines() -> None:
    over: dict[str, int] = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_CLASS_LINES:
                    over[f"{path.relative_to(PACKAGE)}:{node.name}"] = lines
    assert not over, f"classes over {MAX_CLASS_LINES} lines (give each responsibility its own class): {over}"
