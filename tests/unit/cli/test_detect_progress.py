"""`trainguard detect` draws a progress bar on stderr when, and only when, stderr is a terminal."""

from __future__ import annotations

import io
import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from trainguard.cli import main, progressbar


def _log(path: Path, lines: int) -> Path:
    path.write_text("".join(f"[rank0]: iteration {i:6d}/ 9999 | elapsed time per iteration (ms): 900.0\n"
                            for i in range(lines)))
    return path


def test_render_with_and_without_a_total() -> None:
    assert progressbar.render("detect a.log", 150_000_000, 300_000_000, 2.0) == (
        "detect a.log [############            ]  50%  150/300 MB  75.0 MB/s"
    )
    assert progressbar.render("detect -", 3_000_000, None, 0.5) == "detect - 3 MB  6.0 MB/s"


def test_the_bar_is_redrawn_in_place_and_erased() -> None:
    out = io.StringIO()
    bar = progressbar.ProgressBar(out, "detect a.log", 100)
    bar.update(100)  # the end is always drawn
    bar.close()
    text = out.getvalue()
    _, drawn, erased, end = text.split("\r")
    assert drawn.startswith("detect a.log [") and "100%" in drawn
    assert (erased, end) == (" " * len(drawn), "")


def test_a_terminal_gets_the_bar_and_stdout_stays_clean(tmp_path: Path) -> None:
    log = _log(tmp_path / "train.log", 20_000)
    primary, secondary = pty.openpty()
    try:
        process = subprocess.run(
            [sys.executable, "-m", "trainguard.cli.main", "detect", "--format", "json", str(log)],
            stdout=subprocess.PIPE,
            stderr=secondary,
            check=False,
            timeout=300,
        )
        os.close(secondary)
        secondary = -1
        drawn = b""
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # EIO: the other side is closed and everything was read
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        os.close(primary)
        if secondary >= 0:
            os.close(secondary)
    assert process.returncode == 0
    assert json.loads(process.stdout)["symptom"] == "healthy"
    text = drawn.decode()
    assert f"detect {log} [" in text and "100%" in text and "MB/s" in text
    assert text.endswith("\r")  # erased: the cursor is back at the start of a blank line


def test_no_bar_when_stderr_is_not_a_terminal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = _log(tmp_path / "train.log", 2_000)
    assert main.main(["detect", "--format", "json", str(log)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert json.loads(out)["path"] == str(log)


def test_a_run_imports_only_its_own_sub_command(tmp_path: Path) -> None:
    # Start-up is a good part of `trainguard scan` on a few hundred MB: the engine, the HTTP
    # server and the store are not imported for it.
    log = _log(tmp_path / "train.log", 10)
    probe = (
        "import sys; from trainguard.cli import main; "
        f"code = main.main(['scan', '--stats', {str(log)!r}]); "
        "print(code, sorted(m for m in ('trainguard.cli.run', 'trainguard.cli.operator', 'trainguard.cli.audit') "
        "if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.splitlines()[-1] == "0 []"
