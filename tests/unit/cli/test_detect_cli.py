"""`trainguard detect`: the JSON contract, text output, bad input, stdin, operator patterns."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from trainguard.cli import main

TIMEOUT = (
    "[rank3]:[E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=52, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600034 "
    "milliseconds before timing out."
)


def test_json_contract_and_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hang = tmp_path / "hang.log"
    hang.write_text("step 1 | loss 2.0\n" + TIMEOUT + "\n")
    healthy = tmp_path / "ok.log"
    healthy.write_bytes(b"\x1b[32mstep 1\x1b[0m\n\xff\xfe\x00 junk\n")
    code = main.main(["detect", "--format", "json", str(hang), str(tmp_path / "missing.log"), str(healthy)])
    out, err = capsys.readouterr()
    assert code == 1
    assert "missing.log" in err
    assert "Traceback" not in err
    first, second = (json.loads(line) for line in out.splitlines())
    assert set(first) == {"path", "symptom", "category", "attribution", "evidence", "suspect_nodes", "suspect_ranks"}
    assert (first["symptom"], first["category"], first["attribution"]) == ("hang", "nccl_timeout", "unknown")
    assert first["evidence"][0] == {"line": 2, "text": TIMEOUT, "pattern": "nccl.watchdog_timeout"}
    assert (second["symptom"], second["category"], second["attribution"]) == ("healthy", "none", "none")
    assert (second["evidence"], second["suspect_nodes"], second["suspect_ranks"]) == ([], [], [])


def test_text_format_and_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO((TIMEOUT + "\n").encode())))
    assert main.main(["detect", "-"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("-: hang (nccl_timeout, attribution unknown)")
    assert "line       1 [first cause]" in out


def test_operator_patterns_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    extra = tmp_path / "mine.yaml"
    extra.write_text(
        "- id: site.lustre_evicted\n  category: filesystem_io\n  attribution_hint: system\n  severity: fatal\n"
        "  regex: 'LustreError: .* evicted'\n"
    )
    log = tmp_path / "job.log"
    log.write_text("node7: LustreError: 11-0: scratch-MDT0000: operation failed; client was evicted\n")
    assert main.main(["detect", "--format", "json", "--patterns-file", str(extra), str(log)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["category"], result["attribution"], result["suspect_nodes"]) == (
        "filesystem_io",
        "system",
        ["node7"],
    )


def test_bad_patterns_file_and_bad_regex_are_clear_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("- id: x\n")
    assert main.main(["detect", "--patterns-file", str(bad), "-"]) == 2
    assert main.main(["detect", "--progress-regex", "(unclosed", "-"]) == 2
    err = capsys.readouterr().err
    assert "bad.yaml" in err
    assert "progress regex" in err
    assert "Traceback" not in err


def test_directory_is_an_error_not_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main.main(["detect", str(tmp_path)]) == 1
    assert "is a directory" in capsys.readouterr().err
