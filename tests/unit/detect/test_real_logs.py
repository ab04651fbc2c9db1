"""Runs `trainguard detect --format json` over real failure logs people pasted into public issues.

The excerpts (tests/data/real/, sources in SOURCES.md) were collected to measure how detection
generalises beyond the self-written evaluation set (tests/data/eval/). Files named ``heldout_*``
were collected after the fixes this set prompted, as a check against tuning to it; later files
carry a ``batch`` number, and every batch's first-sight score is kept in HISTORY.md. The labels are
what a careful engineer reads from each excerpt, written before the detector was run on it; files
marked ``ambiguous`` are excluded from the miss list. The printed report gives symptom, category,
attribution (also where the label names a cause), recall, healthy and suspect figures, per batch
too, and the labelled -> detected symptom confusion.

Asserted: no healthy log is called a crash; no unambiguous failing log is called healthy; and
symptom+category accuracy stays at or above ``SYMPTOM_CATEGORY_FLOOR``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.detect import labelled

REAL = Path(__file__).resolve().parents[2] / "data" / "real"
SYMPTOM_CATEGORY_FLOOR = 0.95
"""Share of files whose symptom AND category are right. Each batch of files is scored on the code
before it prompts any change (its first-sight score, in tests/data/real/HISTORY.md: batches 1-15
scored between 7/14 and 4/4; batch 11 at 9/18; batch 16 at 11/14; batch 17 at 6/10, batch 18 at 1/3), then the
detector is tuned on classes of wording. The whole set now reaches 320/335 (batches 8-18 added 157 files); the
floor leaves room for a few misses, not for a regression."""
HANG_STRAGGLER_FLAGGED_FLOOR = 0.8
"""Share of files labelled hang or straggler that are not called healthy (issue 23's goal on the project's own
corpus): 18/21 now; the misses are two excerpts without timestamps and a ten-minute silence (HISTORY.md)."""


KNOWN_MISSED_FAILURES = {
    "killed_localized_chinese_after_metrics.log": "the shell's Killed in a Chinese locale; catalog regexes are "
    "ASCII-only by contract (the portable subset every engine reads alike), so a translated message cannot be "
    "matched",
    "xid31_condensed_kern_log_record.log": "the reporter rewrote the kernel's Xid records in a short form of their "
    "own (no 'NVRM: Xid (PCI:...)'); a bare 'Xid 31' would also match prose about Xids",
    "hang_after_checkpoint_save_then_ctrl_c_deepspeed.log": "ten minutes of silence after a checkpoint save, then "
    "the user's Ctrl-C: under the post-mortem silence floor (the live hang timeout, 30 min, above a large model's "
    "save)",
}
"""Unambiguous failing logs detection is known to call healthy, each with why. Listed rather than
hidden: the test fails if one of them starts being detected (remove it) or another one is missed."""


_BATCH_KEYS = ("symptom+category", "attribution", "attribution where known")
"""Per-batch figures printed under the totals; each batch's first-sight score is in HISTORY.md."""


_PUBLIC_SOURCES = ("https://github.com/", "https://forums.developer.nvidia.com/")


def _labels() -> dict[str, dict[str, Any]]:
    return labelled.load_labels(REAL)


def _detect_all() -> dict[str, dict[str, Any]]:
    return labelled.detect_all(REAL)


def test_every_log_is_labelled_and_sourced() -> None:
    labels = _labels()
    logs = {p.name for p in REAL.glob("*.log")}
    assert set(labels) == logs
    sources = (REAL / "SOURCES.md").read_text(encoding="utf-8")
    assert [name for name in sorted(logs) if name not in sources] == []
    # Public threads: GitHub issues and pull requests, and a few vendor forum topics (NVIDIA's developer
    # forums carry the Xid and GSP reports that GitHub issues rarely do).
    assert all(str(want.get("source", "")).startswith(_PUBLIC_SOURCES) for want in labels.values())


def test_real_logs(capsys: pytest.CaptureFixture[str]) -> None:
    labels = _labels()
    assert len(labels) >= 30
    got = _detect_all()
    result = labelled.score(labels, got, labelled.MISS_FIELDS)
    counts, n = result.counts, result.counts["files"]
    ambiguous = sum(1 for w in labels.values() if w.get("ambiguous"))
    per_batch = [
        f"  batch {batch} ({len(subset)} files, now): "
        + ", ".join(f"{key} {right}/{of}" for key in _BATCH_KEYS for right, of in [part.share(key)])
        for batch, subset in labelled.batches(labels).items()
        for part in [labelled.score(subset, got, labelled.MISS_FIELDS)]
    ]
    with capsys.disabled():
        print("\n" + result.report(f"real logs: {n} files ({ambiguous} ambiguous)", labelled.REPORT_KEYS))
        print("\n".join(per_batch))

    healthy_called_crash = [
        name for name, want in labels.items() if want["symptom"] == "healthy" and got[name]["symptom"] == "crash"
    ]
    assert healthy_called_crash == []
    failing_called_healthy = [
        name
        for name, want in labels.items()
        if want["symptom"] != "healthy" and not want.get("ambiguous") and got[name]["symptom"] == "healthy"
    ]
    assert sorted(failing_called_healthy) == sorted(KNOWN_MISSED_FAILURES)
    assert counts["symptom+category"] / n >= SYMPTOM_CATEGORY_FLOOR
    stalled = [name for name, want in labels.items() if want["symptom"] in ("hang", "straggler")]
    flagged = [name for name in stalled if got[name]["symptom"] != "healthy"]
    assert len(flagged) / len(stalled) >= HANG_STRAGGLER_FLAGGED_FLOOR


def test_evidence_starts_with_the_initiating_line() -> None:
    got = _detect_all()
    for result in got.values():
        assert len(result["evidence"]) <= 20
        assert all(set(e) == {"line", "text", "pattern"} for e in result["evidence"])
    launch_failure = got["cuda_launch_failure_megatron_tp_group.log"]["evidence"][0]
    assert "unspecified launch failure" in launch_failure["text"]
    assert launch_failure["pattern"] == "cuda.unspecified_launch_failure"
