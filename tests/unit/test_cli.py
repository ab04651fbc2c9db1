"""The ``trainguard`` entry point: --help lists the sub-commands, --version names the release.

Checked twice: through ``trainguard.cli.main.main`` (the function the console script calls) and
through the installed console script itself, so a broken ``[project.scripts]`` entry shows up
(that one runs a subprocess, so it is not marked ``unit``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import trainguard
from trainguard.cli import main


def console_script() -> str:
    """The ``trainguard`` script of the interpreter running the tests (the project's venv)."""
    beside = Path(sys.executable).with_name("trainguard")
    found = str(beside) if beside.exists() else shutil.which("trainguard")
    if found is None:
        pytest.fail("the trainguard console script is not installed (pip install -e .)")
    return found


@pytest.mark.unit
def test_help_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: trainguard")
    for name in main.SUBCOMMANDS:
        assert name in out


@pytest.mark.unit
def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main.main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"trainguard {trainguard.__version__}"


@pytest.mark.unit
def test_no_command_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main.main([]) == 2
    assert "usage: trainguard" in capsys.readouterr().out


@pytest.mark.unit
def test_unknown_command_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main.main(["no-such-command"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'no-such-command'" in err
    assert "Traceback" not in err


# not marked unit: it starts a subprocess (the real console script)
def test_console_script_help_and_version() -> None:
    script = console_script()
    helped = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("usage: trainguard")
    for name in main.SUBCOMMANDS:
        assert name in helped.stdout
    versioned = subprocess.run([script, "--version"], capture_output=True, text=True, timeout=60, check=False)
    assert versioned.returncode == 0, versioned.stderr
    assert versioned.stdout.strip() == f"trainguard {trainguard.__version__}"
