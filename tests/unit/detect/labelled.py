"""Shared by the labelled-log suites (tests/data/eval, tests/data/real): labels, one CLI run, scores.

Also a command, so a new batch can be scored on the code as it is *before* any tuning (its
"first sight" score, kept in tests/data/real/HISTORY.md)::

    .venv/bin/python -m tests.unit.detect.labelled tests/data/real --batch 3
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import io
import json
import sys
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

    def share(self, key: str) -> tuple[int, int]:
        """(right, out of) for ``key``; the denominators of the conditional keys are counted apart."""
        return self.counts[key], self.counts[DENOMINATOR.get(key, "files")]

    def report(self, title: str, keys: Sequence[str]) -> str:
        lines = [title]
        for k in keys:
            right, n = self.share(k)
            lines.append(f"  {k} accuracy: {right}/{n} = {right / n:.0%}" if n else f"  {k} accuracy: -/0")
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
        if want["symptom"] == "unknown":
            pass  # not a text log (``input`` says why): neither healthy nor failing
        elif want["symptom"] == "healthy":
            counts["healthy files"] += 1
            counts["healthy kept healthy"] += have["symptom"] == "healthy"
        else:
            counts["failing files"] += 1
            counts["failure recall"] += have["symptom"] != "healthy"
        if want["symptom"] == "crash":
            counts["crash files"] += 1
            counts["category on crashes"] += have["category"] == want["category"]
        if want["attribution"] not in ("unknown", "none"):
            counts["attribution known"] += 1
            counts["attribution where known"] += have["attribution"] == want["attribution"]
        counts["nodes"] += have["suspect_nodes"] == want["suspect_nodes"]
        counts["ranks"] += have["suspect_ranks"] == want["suspect_ranks"]
        key = tuple(have[f] for f in miss_fields)
        wanted = tuple(want[f] for f in miss_fields)
        if key != wanted:
            tag = "ambiguous" if want.get("ambiguous") else "MISS"
            misses.append(f"  {tag} {name}: got {key}, want {wanted}")
    return Score(counts, confusion, misses)


DENOMINATOR = {
    "failure recall": "failing files",
    "healthy kept healthy": "healthy files",
    "category on crashes": "crash files",
    "attribution where known": "attribution known",
}
"""Keys measured over a subset: recall over failing logs, category over crashes, attribution over
logs whose label names a cause (hardware / system / application) rather than ``unknown``."""

REPORT_KEYS = (
    "symptom",
    "category",
    "symptom+category",
    "attribution",
    "attribution where known",
    "failure recall",
    "healthy kept healthy",
    "category on crashes",
    "nodes",
    "ranks",
)
MISS_FIELDS = ("symptom", "category", "attribution", "suspect_nodes", "suspect_ranks")


def batches(labels: dict[str, dict[str, Any]]) -> dict[int, dict[str, dict[str, Any]]]:
    """Labels grouped by their ``batch`` (0 for the files collected before batches were kept)."""
    grouped: dict[int, dict[str, dict[str, Any]]] = {}
    for name, want in labels.items():
        grouped.setdefault(int(want.get("batch", 0)), {})[name] = want
    return dict(sorted(grouped.items()))


def score_command(argv: Sequence[str] | None = None) -> int:
    """Score a labelled set (or one batch of it) on the code as it is now."""
    parser = argparse.ArgumentParser(prog="python -m tests.unit.detect.labelled")
    parser.add_argument("directory", type=Path)
    parser.add_argument("--batch", type=int, action="append", help="only these batches (repeatable)")
    args = parser.parse_args(argv)
    labels = load_labels(args.directory)
    if args.batch:
        labels = {name: want for name, want in labels.items() if int(want.get("batch", 0)) in args.batch}
    got = detect_all(args.directory)
    result = score(labels, got, MISS_FIELDS)
    which = f"batch {', '.join(map(str, args.batch))}" if args.batch else "all batches"
    print(result.report(f"{args.directory} ({which}): {result.counts['files']} files", REPORT_KEYS))
    return 0


if __name__ == "__main__":
    sys.exit(score_command())
