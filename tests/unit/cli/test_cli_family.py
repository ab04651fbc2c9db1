"""The commands as one family: ``--format text|json`` everywhere (``table`` still accepted), ``--policy`` a
file wherever it is one, the database flags on every command over the audit database, one config file
for every command, scorecard's help about scorecard, and numbers that must be finite refused when not."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainguard.cli import main
from trainguard.settings import EngineSettings

pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("clean_env")]  # clean_env: tests/unit/cli/conftest.py

TRAINGUARD = Path(sys.executable).with_name("trainguard")
OTHERS_OWN = {("detect",)}




def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> list[tuple[tuple[str, ...],
                                                                                argparse.ArgumentParser]]:
    found = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _walk(sub, (*path, name))
    return found


def _option(parser: argparse.ArgumentParser, flag: str) -> argparse.Action | None:
    return next((a for a in parser._actions if flag in a.option_strings), None)


def test_every_text_or_table_format_is_text_and_json_and_accepts_both_names() -> None:
    checked = []
    for path, parser in _walk(main.build_parser(), ()):
        action = _option(parser, "--format")
        if action is None or path == ("patterns", "export"):  # lines|yaml|json: what is exported, not a view
            continue
        assert tuple(action.choices or ()) == ("text", "json"), path
        assert action.default == "text", path
        if path in OTHERS_OWN:  # text|json already; the `table` alias is for their owners to add
            continue
        assert action.type is not None and action.type("table") == "text", path
        checked.append(" ".join(path))
    assert {"audit", "goodput", "backtest", "scorecard", "doctor", "patterns list", "patterns fired",
            "policy validate"} <= set(checked)


def test_table_is_still_accepted_where_it_was_the_name() -> None:
    for argv in (["goodput", "--format", "table"], ["scorecard", "--format", "table"],
                 ["doctor", "--format", "table"], ["backtest", "--policy", "p.yaml", "--format", "table"],
                 ["audit", "--format", "table"]):
        assert main.build_parser().parse_args(argv).format == "text", argv


def test_every_command_over_the_audit_database_finds_it_as_run_does() -> None:
    for path in (("audit",), ("goodput",), ("backtest",), ("patterns", "fired"), ("scorecard",), ("db", "upgrade")):
        parser = dict(_walk(main.build_parser(), ()))[path]
        for flag in ("--db", "--db-file", "--home", "--config"):
            assert _option(parser, flag) is not None, (path, flag)


def test_audit_goodput_and_backtest_read_the_database_in_home(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                              ) -> None:
    home = tmp_path / "state"
    assert main.main(["db", "upgrade", "--home", str(home)]) == 0
    policy = tmp_path / "p.yaml"
    policy.write_text("mode: Monitor\n")
    url_file = tmp_path / "db-url"
    url_file.write_text(f"sqlite+aiosqlite:///{home / 'trainguard.db'}\n")
    capsys.readouterr()
    for argv in (["audit", "--home", str(home), "--format", "json"],
                 ["goodput", "--home", str(home), "--format", "json"],
                 ["backtest", "--policy", str(policy), "--home", str(home), "--format", "json"],
                 ["audit", "--db-file", str(url_file)], ["goodput", "--db-file", str(url_file)]):
        assert main.main(argv) == 0, (argv, capsys.readouterr().err)
    assert capsys.readouterr().err == ""


def test_scorecard_reads_the_config_file_run_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAINGUARD_HOME")  # the file's home, not the environment's
    home = tmp_path / "state"
    assert main.main(["db", "upgrade", "--home", str(home)]) == 0
    policy = tmp_path / "p.yaml"
    policy.write_text("mode: Monitor\n")
    run_config = tmp_path / "trainguard.yaml"
    run_config.write_text(f"home: {home}\npolicy: [{policy}]\npoll: 2\nhttp-listen: 127.0.0.1:0\n"
                          "victorialogs_url: http://127.0.0.1:9428\n")
    capsys.readouterr()
    assert main.main(["scorecard", "--config", str(run_config), "--format", "json"]) == 0, capsys.readouterr().err
    assert main.main(["doctor", "--config", str(run_config), "--print-config"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["settings"]["policy"] == {"value": [str(policy)], "source": f"file {run_config}"}


def test_a_key_no_command_knows_is_still_refused_in_the_config_file(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "trainguard.yaml"
    path.write_text("polll: 2\n")
    assert main.main(["scorecard", "--config", str(path)]) == 2
    assert f"config file {path}: unknown setting 'polll'" in capsys.readouterr().err


def test_a_setting_given_twice_in_the_config_file_is_refused(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "trainguard.yaml"
    path.write_text("mode: monitor\npoll: 2\nmode: action\n")
    assert main.main(["run", "--scheduler", "slurm-local", "--config", str(path), "--print-config"]) == 2
    err = capsys.readouterr().err
    assert f"config file {path}: duplicate key 'mode' at line 3 (first given at line 1)" in err


def test_scorecard_help_lists_only_what_scorecard_reads() -> None:
    text = dict(_walk(main.build_parser(), ()))[("scorecard",)].format_help()
    for unrelated in ("--victorialogs-url", "--loki-url", "--prometheus-url", "--http-listen", "--shards",
                      "--poll", "--max-actions-per-hour", "--patterns-file", "--journal-max-bytes"):
        assert unrelated not in text, unrelated
    options = [a for a in dict(_walk(main.build_parser(), ()))[("scorecard",)]._actions if a.option_strings]
    assert len(options) <= 20


def test_scorecard_takes_the_policy_by_name_as_policy_name(capsys: pytest.CaptureFixture[str]) -> None:
    args = main.build_parser().parse_args(["scorecard", "--policy-name", "team-a"])
    assert args.policy_name == "team-a"
    old = main.build_parser().parse_args(["scorecard", "--policy", "team-a"])  # old spelling, for now
    assert old.policy_name == "team-a"
    assert "--policy is deprecated here" in capsys.readouterr().err


def test_goodput_refuses_a_manual_delay_that_is_not_a_number_of_seconds(capsys: pytest.CaptureFixture[str]) -> None:
    for value in ("nan", "inf", "-inf"):
        with pytest.raises(SystemExit) as exited:
            main.build_parser().parse_args(["goodput", f"--manual-delay={value}"])
        assert exited.value.code == 2
        assert f"argument --manual-delay: expected a finite number of seconds, got '{value}'" in \
               capsys.readouterr().err


def test_an_infinite_poll_from_the_environment_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TRAINGUARD_POLL", "inf")
    assert main.main(["run", "--scheduler", "slurm-local", "--print-config"]) == 2
    assert "--poll / TRAINGUARD_POLL: Input should be a finite number" in capsys.readouterr().err
    monkeypatch.setenv("TRAINGUARD_POLL", "nan")
    assert main.main(["run", "--scheduler", "slurm-local", "--print-config"]) == 2
    assert "--poll / TRAINGUARD_POLL: Input should be a finite number" in capsys.readouterr().err


def test_engine_settings_refuse_a_number_that_is_not_finite() -> None:
    with pytest.raises(ValueError, match="discovery_interval_s: expected a finite number, got inf"):
        EngineSettings(discovery_interval_s=float("inf"))
    with pytest.raises(ValueError, match="max_nodes_out_share: expected a finite number, got nan"):
        EngineSettings(max_nodes_out_share=float("nan"))


def test_print_config_prints_the_config_and_nothing_else(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINGUARD_", "SLURM_"))}
    env["TRAINGUARD_HOME"] = str(tmp_path / "home")
    for argv in (["run", "--scheduler", "slurm-local"], ["operator"], ["doctor"], ["scorecard"]):
        done = subprocess.run([str(TRAINGUARD), *argv, "--print-config"], env=env, capture_output=True, text=True,
                              timeout=120, check=False, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, (argv, done.stderr)
        assert done.stderr == "", (argv, done.stderr)
        assert json.loads(done.stdout)["command"] == argv[0]
