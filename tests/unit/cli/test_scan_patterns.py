"""`trainguard patterns` and `trainguard scan`, called through the real CLI entry point."""

from __future__ import annotations

import gzip
import io
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trainguard.cli import main as cli
from trainguard.detect import catalog as catalogs
from trainguard.detect import matcher as matchers

CATALOG = catalogs.load_builtin()

OPS_FILE = """
patterns:
  - id: ops.gpfs_unmounted
    category: filesystem_io
    attribution_hint: system
    severity: error
    regex: 'mmfsd: Unmounted filesystem'
    examples: ['mmfsd: Unmounted filesystem gpfs01']
    counter_examples: ['mmfsd: Mounted filesystem gpfs01']
"""


def _ops(tmp_path: Path, body: str = OPS_FILE) -> Path:
    path = tmp_path / "ops.yaml"
    path.write_text(body, encoding="utf-8")
    return path


def test_export_lines_is_exactly_the_catalog_regexes(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["patterns", "export", "--format", "lines"]) == 0
    assert capsys.readouterr().out.splitlines() == [spec.regex for spec in CATALOG.patterns]


def test_export_lines_includes_operator_patterns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["patterns", "export", "--format", "lines", "--patterns-file", str(_ops(tmp_path))]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "mmfsd: Unmounted filesystem"


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_export_documents_round_trip_through_the_loader(
    tmp_path: Path, fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["patterns", "export", "--format", fmt]) == 0
    path = tmp_path / f"catalog.{fmt}"
    path.write_text(capsys.readouterr().out, encoding="utf-8")
    reloaded = catalogs.load_file(path)  # YAML is a superset of JSON
    assert [spec.id for spec in reloaded] == [spec.id for spec in CATALOG.patterns]
    assert reloaded == list(CATALOG.patterns)


def test_list_table_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["patterns", "list"]) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[0].split() == ["ID", "CATEGORY", "ATTRIBUTION", "SEVERITY"]
    assert "xid.79_fallen_off_bus" in table and "gpu_fallen_off_bus" in table
    assert cli.main(["patterns", "list", "--format", "json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == len(CATALOG.patterns)
    assert rows[0] == {
        "id": CATALOG.patterns[0].id,
        "category": str(CATALOG.patterns[0].category),
        "attribution": str(CATALOG.patterns[0].attribution_hint),
        "severity": str(CATALOG.patterns[0].severity),
    }


def test_patterns_test_passes_on_the_builtin_catalog(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["patterns", "test"]) == 0
    assert ": 0 failure(s)" in capsys.readouterr().out


def test_patterns_test_fails_on_a_wrong_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wrong = OPS_FILE.replace("examples: ['mmfsd: Unmounted", "examples: ['mmfsd: Remounted")
    assert cli.main(["patterns", "test", "--patterns-file", str(_ops(tmp_path, wrong))]) == 1
    assert "FAIL ops.gpfs_unmounted" in capsys.readouterr().out


def test_patterns_test_warns_about_non_portable_operator_regex(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    loose = OPS_FILE.replace("'mmfsd: Unmounted filesystem'", "'mmfsd: Unmounted.*system'")
    assert cli.main(["patterns", "test", "--patterns-file", str(_ops(tmp_path, loose))]) == 0
    assert "warning: ops.gpfs_unmounted" in capsys.readouterr().err


def test_bad_patterns_file_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = OPS_FILE.replace("'mmfsd: Unmounted filesystem'", "'mmfsd(?=x)'")
    assert cli.main(["patterns", "export", "--patterns-file", str(_ops(tmp_path, bad))]) == 2
    err = capsys.readouterr().err
    assert "look-ahead" in err and "Traceback" not in err


def _log(tmp_path: Path) -> Path:
    path = tmp_path / "slurm-88231.out"
    path.write_text(
        "0: iteration 10 | loss 2.1\n"
        "0: [rank0]: Traceback (most recent call last):\n"
        "0: [rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
        "srun: error: node017: task 0: Exited with exit code 1\n"
        "mmfsd: Unmounted filesystem gpfs01",
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize("engine", matchers.available_engines())
def test_scan_stats_prints_one_json_object(tmp_path: Path, engine: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["scan", "--stats", "--engine", engine, str(_log(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 1
    stats = json.loads(out)
    assert stats["lines"] == 5 and stats["matched_lines"] == 3
    assert stats["patterns"]["oom.cuda_out_of_memory"] == 1
    assert stats["patterns"]["python.traceback_start"] == 1
    assert stats["patterns"]["slurm.task_exit_code"] == 1
    assert stats["engine"] == engine and stats["catalog_version"] == CATALOG.version
    assert isinstance(stats["seconds"], float)


def test_scan_with_operator_patterns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["scan", "--stats", "--patterns-file", str(_ops(tmp_path)), str(_log(tmp_path))]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["matched_lines"] == 4 and stats["patterns"]["ops.gpfs_unmounted"] == 1
    assert stats["catalog_version"].endswith("+local")


@pytest.mark.parametrize("target", ["missing.log", "."])
def test_scan_of_a_missing_file_or_directory_is_reported_like_detect(
    tmp_path: Path, target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / target
    assert cli.main(["scan", "--stats", str(path)]) == 1
    captured = capsys.readouterr()
    stats = json.loads(captured.out)
    assert (stats["input"], stats["lines"], stats["matched_lines"]) == ("unreadable", 0, 0)
    reason = "No such file or directory" if target == "missing.log" else "is a directory"
    assert captured.err == f"trainguard scan: {path}: {reason}\n"
    assert cli.main(["detect", str(path)]) == 1
    assert capsys.readouterr().err == f"trainguard detect: {path}: {reason}\n"


def test_scan_of_an_unreadable_file_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _log(tmp_path)
    path.chmod(0)
    try:
        readable = path.open("rb")
    except PermissionError:
        readable = None
    if readable is not None:  # running as root: permissions do not apply
        readable.close()
        pytest.skip("running as root, file permissions cannot make a file unreadable")
    assert cli.main(["scan", "--stats", str(path)]) == 1
    assert "Permission denied" in capsys.readouterr().err


def test_scan_of_several_files_and_standard_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    log = _log(tmp_path)
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(log.read_bytes())))
    assert cli.main(["scan", "--stats", str(log), "-", str(empty)]) == 1
    out, err = capsys.readouterr()
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["path"], r["input"]) for r in rows] == [(str(log), "ok"), ("-", "ok"), (str(empty), "empty")]
    assert rows[0]["matched_lines"] == rows[1]["matched_lines"] == 3 and rows[0]["patterns"] == rows[1]["patterns"]
    assert (rows[2]["lines"], rows[2]["matched_lines"]) == (0, 0)
    assert err == f"trainguard scan: {empty}: empty input, nothing to analyse\n"
    assert cli.main(["scan", "-", "-"]) == 2
    assert "only once" in capsys.readouterr().err


def test_scan_counts_a_compressed_input_but_reports_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    packed = tmp_path / "job.log.gz"
    packed.write_bytes(gzip.compress(_log(tmp_path).read_bytes()))
    assert cli.main(["scan", str(packed)]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["input"] == "binary"
    assert "gzip-compressed data" in captured.err


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("rg") is None, reason="ripgrep (rg) is not installed; hack/test.sh installs it")
@pytest.mark.parametrize("engine", matchers.available_engines())
def test_scan_matched_lines_equal_ripgrep(tmp_path: Path, engine: str, capsys: pytest.CaptureFixture[str]) -> None:
    rnd = random.Random(11)
    lines = [line.encode() for spec in CATALOG.patterns for line in (*spec.examples, *spec.counter_examples)]
    lines += [bytes(rnd.randrange(256) for _ in range(rnd.randrange(200))) for _ in range(500)]
    lines += [line.replace(b" ", b"\x00 ", 1) + b"\r" for line in lines[:200]]
    lines.append(b"x" * 2_000_000 + b" Segmentation fault")
    rnd.shuffle(lines)
    log = tmp_path / "mixed.log"
    log.write_bytes(b"\n".join(lines))
    assert cli.main(["patterns", "export", "--format", "lines"]) == 0
    regexes = tmp_path / "patterns.txt"
    regexes.write_text(capsys.readouterr().out, encoding="utf-8")
    rg = subprocess.run(["rg", "-c", "-f", str(regexes), str(log)], capture_output=True, text=True, check=True)
    assert cli.main(["scan", "--stats", "--engine", engine, str(log)]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["matched_lines"] == int(rg.stdout.strip())


SHADOWED = """
patterns:
  - id: site.batch_shape
    category: python_exception
    attribution_hint: application
    severity: error
    regex: 'AssertionError: batch shape'
    examples:
      - '[rank3]: AssertionError: batch shape mismatch'
      - '[rank3]: AssertionError: batch shape mismatch after CUDA error: an illegal memory access was encountered'
"""


def test_patterns_test_fails_when_a_builtin_entry_decides_the_operators_example(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An operator's entry that matches its example but loses the first-cause ranking to a built-in
    entry would never be what `detect` reports: the test says which entry decides instead."""
    assert cli.main(["patterns", "test", "--only", "site.", "--patterns-file", str(_ops(tmp_path, SHADOWED))]) == 1
    out = capsys.readouterr().out
    assert "FAIL site.batch_shape: example is read as cuda_illegal_memory (decided by cuda." in out
    assert out.count("FAIL") == 1
    assert "2 lines checked" in out


def test_patterns_test_only_own_entries_and_sample_logs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sample = tmp_path / "sample.log"
    sample.write_text("step 1 | loss 2.0\nmmfsd: Unmounted filesystem gpfs01\nall good\n", encoding="utf-8")
    args = ["patterns", "test", "--only", "ops.", "--patterns-file", str(_ops(tmp_path)), str(sample)]
    assert cli.main(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("2 lines checked with engine ")  # the one example and one counter-example
    assert any(line.startswith(f"{sample}:2: ") and "ops.gpfs_unmounted" in line for line in out)
    assert not any(line.startswith((f"{sample}:1:", f"{sample}:3:")) for line in out)
    assert cli.main(["patterns", "test", str(tmp_path / "missing.log")]) == 2
