"""Shared by the labelled-log suites (tests/data/eval, tests/data/real): labels, one CLI run."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import json
from collections import Counter
from collections.abc import Sequence
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
        code = main.main(["detect", "--format", "json", *paths])
    results = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(results) == len(paths)
    # Exit 1 says some input was not a text log (an empty file is labelled as such); never a crash.
    assert code == (1 if any(r["input"] != "ok" for r in results) else 0)
    return {Path(r["path"]).name: r for r in results}


@dataclasses.dataclass
class Score:
    """How a set's detection compares with its labels."""

    counts: Counter[str]
    confusion: Counter[tuple[str, str]]
    misses: list[str]
    """One line per file whose ``miss_fields`` differ: ``MISS`` or, for a file labelled ambiguous, ``ambiguous``."""

    def report(self, title: str, keys: Sequence[str]) -> str:
        n = self.counts["files"]
        lines = [title]
        lines += [f"  {k} accuracy: {self.counts[k]}/{n} = {self.counts[k] / n:.0%}" for k in keys]
        lines.append("  confusion (labelled -> detected): "
                     + ", ".join(f"{w}->{h}: {c}" for (w, h), c in sorted(self.confusion.items())))
        return "\n".join(lines + self.misses)


def score(labels: dict[str, dict[str, Any]], got: dict[str, dict[str, Any]], miss_fields: Sequence[str]) -> Score:
    """Per-field accuracy counts, the symptom confusion, and the files whose ``miss_fields`` differ."""
    counts: Counter[str] = Counter()
    confusion: Counter[tuple[str, str]] = Counter()
    misses: list[str] = []
    for name, want in sorted(labels.items()):
        have = got[name]
        confusion[(want["symptom"], have["symptom"])] += 1
        counts["files"] += 1
        counts["symptom"] += have["symptom"] == want["symptom"]
        counts["category"] += have["category"] == want["category"]
        counts["symptom+category"] += (have["symptom"], have["category"]) == (want["symptom"], want["category"])
        counts["attribution"] += have["attribution"] == want["attribution"]
        counts["nodes"] += have["suspect_nodes"] == want["suspect_nodes"]
        counts["ranks"] += have["suspect_ranks"] == want["suspect_ranks"]
        key = tuple(have[f] for f in miss_fields)
        wanted = tuple(want[f] for f in miss_fields)
        if key != wanted:
            tag = "ambiguous" if want.get("ambiguous") else "MISS"
            misses.append(f"  {tag} {name}: got {key}, want {wanted}")
    return Score(counts, confusion, misses)
