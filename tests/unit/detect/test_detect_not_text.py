"""`trainguard detect` never calls an input it could not read as text healthy (issue 27, docs/safety.md).

An empty, compressed or mostly-binary input, or one that cannot be opened, says ``unknown`` in its
symptom and attribution (JSON) and in its text line; a failure found in the readable part of a
mostly-binary file is still reported as such.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from trainguard.cli import main

TIMEOUT = (
    "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, "
    "Timeout(ms)=600000) ran for 600034 milliseconds before timing out."
)


def test_empty_binary_and_unreadable_inputs_say_unknown_never_healthy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inputs = {
        "empty": b"",
        "gzip": gzip.compress(b"step 1 | loss 2.0\n" * 50),
        "junk": bytes(range(256)) * 64,
        "holed": bytes(16384) + b"step 1 | loss 2.0\n",
    }
    paths = []
    for name, data in inputs.items():
        path = tmp_path / f"{name}.bin"
        path.write_bytes(data)
        paths.append(str(path))
    paths.append(str(tmp_path / "missing.log"))
    assert main.main(["detect", "--format", "json", *paths]) == 1
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    # JSON: the symptom vocabulary is the contract's (crash|hang|straggler|healthy); what was not read
    # says so in ``input``, the attribution and the exit code
    assert [(Path(r["path"]).stem, r["input"], r["symptom"], r["attribution"]) for r in rows] == [
        ("empty", "empty", "healthy", "unknown"),
        ("gzip", "binary", "healthy", "unknown"),
        ("junk", "binary", "healthy", "unknown"),
        ("holed", "binary", "healthy", "unknown"),
        ("missing", "unreadable", "healthy", "unknown"),
    ]
    assert main.main(["detect", str(tmp_path / "holed.bin")]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"{tmp_path / 'holed.bin'}: unknown [binary input]")
    assert "healthy" not in out


def test_a_failure_inside_a_mostly_binary_file_is_still_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "holed.log"
    path.write_bytes(bytes(16384) + (TIMEOUT + "\n").encode())
    assert main.main(["detect", "--format", "json", str(path)]) == 1
    result = json.loads(capsys.readouterr().out)
    assert (result["symptom"], result["category"], result["input"]) == ("hang", "nccl_timeout", "binary")
