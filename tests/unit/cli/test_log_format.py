"""``--log-format json`` (``TRAINGUARD_LOG_FORMAT=json``): one JSON object per log line on stderr, with the
workload, attempt and generation of the recovery a line is about when they are known."""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TRAINGUARD = Path(sys.executable).with_name("trainguard")


def _record(msg: str, *args: object, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("trainguard.engine", logging.INFO, __file__, 1, msg, args, None)
    for name, value in extra.items():
        setattr(record, name, value)
    return record


def _json(record: logging.LogRecord) -> dict[str, object]:
    from trainguard.cli import logsetup

    line = logsetup.JsonFormatter().format(record)
    assert "\n" not in line
    parsed: dict[str, object] = json.loads(line)
    return parsed


def test_a_line_of_the_engines_convention_carries_its_workload_attempt_and_generation() -> None:
    out = _json(_record("%s attempt %d generation %d: requeue verified", "slurm/c/42", 3, 2))
    assert out["message"] == "slurm/c/42 attempt 3 generation 2: requeue verified"
    assert (out["workload"], out["attempt"], out["generation"]) == ("slurm/c/42", 3, 2)
    assert out["level"] == "INFO" and out["logger"] == "trainguard.engine"
    when = datetime.datetime.fromisoformat(str(out["time"]))
    assert when.utcoffset() == datetime.timedelta(0)
    partial = _json(_record("%s attempt %d: reading %s", "slurm/c/42", 1, "files"))
    assert (partial["workload"], partial["attempt"]) == ("slurm/c/42", 1) and "generation" not in partial


def test_a_line_logged_inside_a_recovery_task_carries_the_tasks_ids() -> None:
    async def recover() -> dict[str, object]:
        return _json(_record("requeue of job %s verified", "42"))

    async def main() -> dict[str, object]:
        task = asyncio.ensure_future(recover())
        task.set_name("recover:jobset/team-a/llm:7:4")  # as the engine names a recovery (RecoveryRunner.start)
        return await task

    out = asyncio.run(main())
    assert (out["workload"], out["attempt"], out["generation"]) == ("jobset/team-a/llm", 7, 4)


def test_explicit_fields_win_and_a_line_about_no_recovery_has_none() -> None:
    out = _json(_record("%s attempt %d: x", "slurm/c/1", 1, workload="slurm/c/9", attempt=2))
    assert (out["workload"], out["attempt"]) == ("slurm/c/9", 2)
    plain = _json(_record("sharding by %s into %d shards", "cluster", 4))
    assert not {"workload", "attempt", "generation"} & set(plain)


def test_an_exception_is_one_field_of_the_same_line() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        record = logging.LogRecord("trainguard.run", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    out = _json(record)
    assert "RuntimeError: boom" in str(out["exception"])


@pytest.mark.parametrize("how", ["flag", "env"])
def test_run_logs_json_lines_only(how: str, tmp_path: Path) -> None:
    if shutil.which("squeue") is None:
        pytest.skip("the Slurm client commands are not installed")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINGUARD_", "SLURM_"))}
    conf = tmp_path / "slurm.conf"
    conf.write_text("")  # every Slurm command fails at once: --once ends with one line, exit 1
    env["SLURM_CONF"] = str(conf)
    argv = [str(TRAINGUARD), "run", "--scheduler", "slurm-local", "--once", "--db",
            f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}"]
    if how == "flag":
        argv += ["--log-format", "json"]
    else:
        env["TRAINGUARD_LOG_FORMAT"] = "JSON"
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False,
                          stdin=subprocess.DEVNULL)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1, done.stderr
    assert lines[-1].startswith("trainguard run: scheduler unreachable: "), done.stderr  # the command's verdict
    logged = [json.loads(line) for line in lines[:-1]]  # every log line is one JSON object
    assert any(str(row["message"]).startswith("trainguard run: scheduler slurm-local") for row in logged), logged
    assert all({"time", "level", "logger", "message"} <= set(row) for row in logged)
    assert not any(row["logger"] == "alembic.runtime.plugins" for row in logged)


def test_a_log_format_nobody_knows_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from trainguard.cli import main

    monkeypatch.setenv("TRAINGUARD_HOME", str(tmp_path))
    monkeypatch.setenv("TRAINGUARD_LOG_FORMAT", "yaml")
    assert main.main(["run", "--scheduler", "slurm-local", "--print-config"]) == 2
    assert "--log-format / TRAINGUARD_LOG_FORMAT: Input should be 'text' or 'json'" in capsys.readouterr().err
