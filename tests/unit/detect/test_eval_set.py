"""Runs `trainguard detect --format json` over the labelled evaluation logs and reports accuracy.

The logs (tests/data/eval/) are composed from documented error texts and public reports; the
labels are the verdict a careful engineer reads from each log. Files marked ``ambiguous`` are
only required not to be called healthy. Asserted: no healthy log is called a crash; symptom,
category and suspect nodes are right on every unambiguous file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.detect import labelled

EVAL = Path(__file__).resolve().parents[2] / "data" / "eval"


def _labels() -> dict[str, dict[str, Any]]:
    return labelled.load_labels(EVAL)


def _detect_all() -> dict[str, dict[str, Any]]:
    return labelled.detect_all(EVAL)


def test_eval_set(capsys: pytest.CaptureFixture[str]) -> None:
    labels = _labels()
    assert len(labels) >= 40
    got = _detect_all()
    result = labelled.score(labels, got, ("symptom", "category", "suspect_nodes"))
    with capsys.disabled():
        print("\n" + result.report(f"eval set: {result.counts['files']} files",
                                   ("symptom", "category", "attribution", "nodes", "ranks")))
    misses = result.misses

    healthy_called_crash = [
        name for name, want in labels.items() if want["symptom"] == "healthy" and got[name]["symptom"] == "crash"
    ]
    assert healthy_called_crash == []
    failing_files = [name for name, want in labels.items() if want["symptom"] != "healthy"]
    assert all(got[name]["symptom"] != "healthy" for name in failing_files)
    wrong = [m for m in misses if m.startswith("  MISS")]
    assert wrong == []
    not_text = {name: got[name]["input"] for name, want in labels.items() if want.get("input", "ok") != "ok"}
    assert {name: got[name]["input"] for name in got if got[name]["input"] != "ok"} == not_text
    assert not_text == {"healthy_empty.log": "empty"}


def test_evidence_is_capped_and_initiating_first() -> None:
    got = _detect_all()
    for result in got.values():
        assert len(result["evidence"]) <= 20
        assert all(set(e) == {"line", "text", "pattern"} for e in result["evidence"])
    buried = got["crash_cuda_illegal_buried.log"]
    assert "illegal memory access" in buried["evidence"][0]["text"]
