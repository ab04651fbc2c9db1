"""`trainguard detect`: the JSON contract, text output, bad input, stdin, operator patterns."""

from __future__ import annotations

import gzip
import io
import json
import random
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
    assert err == f"trainguard detect: {tmp_path / 'missing.log'}: No such file or directory\n"
    first, missing, second = (json.loads(line) for line in out.splitlines())
    assert set(first) == {
        "path", "symptom", "category", "attribution", "evidence", "suspect_nodes", "suspect_ranks", "input",
    }
    assert (first["symptom"], first["category"], first["attribution"]) == ("hang", "nccl_timeout", "unknown")
    assert first["evidence"][0] == {"line": 2, "text": TIMEOUT, "pattern": "nccl.watchdog_timeout"}
    assert (missing["path"], missing["input"], missing["evidence"]) == (str(tmp_path / "missing.log"), "unreadable", [])
    assert (second["symptom"], second["category"], second["attribution"]) == ("healthy", "none", "none")
    assert (second["evidence"], second["suspect_nodes"], second["suspect_ranks"]) == ([], [], [])
    assert (first["input"], second["input"]) == ("ok", "ok")  # a stray NUL or escape does not make a log binary


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


def _inputs(tmp_path: Path) -> dict[str, Path]:
    rnd = random.Random(3)
    files = {
        "empty": b"",
        "blank": b"\n  \n\t\n",
        "gzip": gzip.compress((TIMEOUT + "\n").encode() * 50),
        "core": b"\x7fELF\x02\x01\x01" + bytes(4000),
        "zeros": bytes(8192) + b"step 1 | loss 2.0\n",
        "noise": bytes(rnd.randrange(256) for _ in range(20000)),
    }
    paths = {}
    for name, data in files.items():
        paths[name] = tmp_path / f"{name}.log"
        paths[name].write_bytes(data)
    return paths


def test_empty_binary_and_unreadable_inputs_are_reported_not_healthy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = _inputs(tmp_path)
    argv = [str(p) for p in paths.values()]
    assert main.main(["detect", "--format", "json", *argv]) == 1
    out, err = capsys.readouterr()
    got = {Path(r["path"]).stem: r["input"] for r in map(json.loads, out.splitlines())}
    assert got == {"empty": "empty", "blank": "empty", "gzip": "binary", "core": "binary", "zeros": "binary",
                   "noise": "binary"}
    lines = err.splitlines()
    assert len(lines) == len(paths) and all(line.startswith("trainguard detect: ") for line in lines)
    assert f"{paths['empty']}: empty input, nothing to analyse" in err
    assert f"{paths['gzip']}: binary input: gzip-compressed data" in err and "zcat" in err
    assert "Traceback" not in err
    assert main.main(["detect", str(paths["empty"]), str(paths["gzip"])]) == 1
    out = capsys.readouterr().out
    assert out.splitlines() == [
        f"{paths['empty']}: not analysed (empty input)", f"{paths['gzip']}: not analysed (binary input)",
    ]


def test_a_failure_inside_binary_data_is_still_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A log whose first blocks are a NUL hole (a client crash on a network filesystem) still has lines to read.
    path = tmp_path / "holed.log"
    path.write_bytes(bytes(16384) + (TIMEOUT + "\n").encode())
    assert main.main(["detect", "--format", "json", str(path)]) == 1
    result = json.loads(capsys.readouterr().out)
    assert (result["symptom"], result["category"], result["input"]) == ("hang", "nccl_timeout", "binary")


def test_empty_standard_input(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    assert main.main(["detect", "--format", "json", "-"]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["input"] == "empty"
    assert err == "trainguard detect: -: empty input, nothing to analyse\n"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (None, "cannot read: No such file or directory"),
        ("- id: x\n  category: [\n", "not valid YAML"),
        ("- id: site.x\n", "pattern site.x: category: Field required"),
        ("\xff\xfe", "not UTF-8 text"),
    ],
)
@pytest.mark.parametrize(
    "argv",
    [
        ["detect", "--patterns-file", "{}", "-"],
        ["scan", "--patterns-file", "{}", "-"],
        ["patterns", "export", "--patterns-file", "{}"],
        ["patterns", "list", "--patterns-file", "{}"],
        ["patterns", "test", "--patterns-file", "{}"],
        ["run", "--scheduler", "slurm-local", "--patterns-file", "{}"],
        ["operator", "--patterns-file", "{}"],
    ],
    ids=lambda argv: " ".join(a for a in argv[:2] if not a.startswith("-")),
)
def test_patterns_file_errors_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str | None, says: str, argv: list[str]
) -> None:
    path = tmp_path / "ops.yaml"
    if body is not None:
        path.write_bytes(body.encode("latin-1"))
    assert main.main([str(path) if a == "{}" else a for a in argv]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"trainguard {argv[0]}: {path}: ") and says in err, err


def test_a_year_zero_timestamp_is_not_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A timestamp of year 0 (a zeroed clock, junk) is no date: the line is read without one."""
    log = tmp_path / "zero.log"
    log.write_text("0000-01-01 00:00:00 iteration 5/ 10 | elapsed time per iteration (ms): 100\n" + TIMEOUT + "\n")
    code = main.main(["detect", "--format", "json", str(log)])
    out, _ = capsys.readouterr()
    assert code == 0
    assert json.loads(out)["category"] == "nccl_timeout"
