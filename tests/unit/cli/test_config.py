"""One settings definition for `run` and `operator`: flag > environment > config file > default,
secrets from files, the old Action switch names refused, and the built-in policy always Monitor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainguard.cli import config, main, settings_io
from trainguard.cli import run as run_cli
from trainguard.model import vocab

pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("clean_env")]  # clean_env: tests/unit/cli/conftest.py




def parse(command: str, *argv: str) -> tuple[object, dict[str, object]]:
    args = main.build_parser().parse_args([command, *argv])
    cls = config.RunSettings if command == "run" else config.OperatorSettings
    flags = settings_io.flags_of(args, cls)
    return settings_io.load(cls, flags), flags


def test_precedence_flag_over_env_over_file_over_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    settings_file = tmp_path / "trainguard.yaml"
    settings_file.write_text("poll: 7\nhttp-listen: 127.0.0.1:7000\nmode: action\nrest_fallback: none\n")
    monkeypatch.setenv("TRAINGUARD_CONFIG", str(settings_file))
    monkeypatch.setenv("TRAINGUARD_HTTP_LISTEN", "127.0.0.1:6000")
    monkeypatch.setenv("TRAINGUARD_MODE", "monitor")
    settings, flags = parse("run", "--scheduler", "slurm-local", "--mode", "action")
    assert isinstance(settings, config.RunSettings)
    assert settings.mode == "action"  # flag beats env
    assert settings.http_listen == "127.0.0.1:6000"  # env beats file
    assert settings.poll == 7.0  # file beats default
    assert settings.rest_fallback == "none"
    assert settings.log_level == "INFO"  # default
    described = settings_io.describe(settings, flags)["settings"]
    assert described["mode"]["source"] == "flag --mode"
    assert described["http_listen"]["source"] == "env TRAINGUARD_HTTP_LISTEN"
    assert described["poll"]["source"] == f"file {settings_file}"
    assert described["log_level"]["source"] == "default"


def test_config_file_given_as_a_flag_and_unknown_keys_refused(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("namespace: [a, b]\nstatus-interval: 5\n")
    settings, _ = parse("operator", "--config", str(good))
    assert isinstance(settings, config.OperatorSettings)
    assert settings.namespaces() == ("a", "b") and settings.status_interval == 5.0
    bad = tmp_path / "bad.yaml"
    bad.write_text("allow_action: true\n")
    with pytest.raises(config.ConfigError, match="unknown setting 'allow_action'"):
        parse("operator", "--config", str(bad))


def test_every_setting_has_a_flag_and_an_environment_variable() -> None:
    parser = main.build_parser()
    for command, cls in (("run", config.RunSettings), ("operator", config.OperatorSettings)):
        sub = parser.parse_args([command, "--scheduler", "slurm-local"])
        for name in cls.model_fields:
            assert name in vars(sub), f"{command}: setting {name} has no flag"
            assert config.env_names(cls, name)[0] == f"TRAINGUARD_{name.upper()}"


def test_lists_from_the_environment_are_comma_separated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINGUARD_NAMESPACE", "team-a, team-b")
    monkeypatch.setenv("POD_NAMESPACE", "trainguard-system")
    settings, _ = parse("operator")
    assert isinstance(settings, config.OperatorSettings)
    assert settings.namespaces() == ("team-a", "team-b")
    assert settings.pod_namespace == "trainguard-system"


def test_secrets_from_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db_file = tmp_path / "db-url"
    db_file.write_text("postgresql+asyncpg://tg:s3cret@db.internal:5432/trainguard\n")
    jwt_file = tmp_path / "jwt"
    jwt_file.write_text("eyJ.token.sig\n")
    monkeypatch.setenv("TRAINGUARD_DB_URL_FILE", str(db_file))
    settings, flags = parse("operator", "--jwt-file", str(jwt_file))
    assert isinstance(settings, config.OperatorSettings)
    assert settings.database_url() == "postgresql+asyncpg://tg:s3cret@db.internal:5432/trainguard"
    assert settings.slurm_token() == "eyJ.token.sig"
    assert settings.scheduler_env()["SLURM_JWT"] == "eyJ.token.sig"  # for scontrol's auth/jwt
    text = json.dumps(settings_io.describe(settings, flags))
    assert "s3cret" not in text and "eyJ.token.sig" not in text


def test_secrets_from_the_environment_are_redacted(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TRAINGUARD_DB_URL", "postgresql+asyncpg://tg:s3cret@db.internal/trainguard")
    monkeypatch.setenv("SLURM_JWT", "eyJ.env.token")
    assert main.main(["operator", "--print-config"]) == 0
    out = capsys.readouterr().out
    printed = json.loads(out)
    assert "s3cret" not in out and "eyJ.env.token" not in out
    assert printed["settings"]["db_url"]["source"] == "env TRAINGUARD_DB_URL"
    assert printed["settings"]["slurm_jwt"] == {"value": "**********", "source": "env SLURM_JWT"}
    assert printed["environment"]["read"]["SLURM_JWT"] == "setting slurm_jwt"


def test_a_secret_given_twice_or_an_unreadable_file_is_one_line(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINGUARD_DB_URL", "sqlite:///x.db")
    with pytest.raises(config.ConfigError, match="give the database URL once"):
        parse("run", "--scheduler", "slurm-local", "--db-file", str(tmp_path / "url"))
    monkeypatch.delenv("TRAINGUARD_DB_URL")
    with pytest.raises(config.ConfigError, match="cannot read") as info:
        parse("run", "--scheduler", "slurm-local", "--db-file", str(tmp_path / "missing"))
    assert "\n" not in str(info.value)


def test_jwt_on_the_command_line_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    settings, flags = parse("run", "--scheduler", "slurm-rest://localhost:6820", "--jwt", "eyJ.visible")
    assert isinstance(settings, config.Settings)
    settings_io.warn_secret_flags(settings, flags, "trainguard run")
    assert "ps shows it" in caplog.text and "--jwt-file" in caplog.text


@pytest.mark.parametrize("name", ["TRAINGUARD_ALLOW_ACTION", "TRAINGUARD_ACTIONS_ENABLED"])
def test_old_switch_variables_are_an_error_not_ignored(monkeypatch: pytest.MonkeyPatch, name: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(name, "true")
    assert main.main(["operator", "--print-config"]) == 2
    err = capsys.readouterr().err
    assert f"{name} is no longer read" in err and "TRAINGUARD_MODE=action" in err


def test_old_allow_action_flag_names_its_replacement(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main.main(["operator", "--allow-action"])
    assert info.value.code == 2
    assert "--allow-action was replaced by --mode action" in capsys.readouterr().err


def test_mode_is_one_name_on_both_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINGUARD_MODE", "Action")
    for command in ("run", "operator"):
        settings, _ = parse(command, "--scheduler", "slurm-local")
        assert isinstance(settings, config.Settings)
        assert settings.mode == "action"
        assert settings.effective()["action_switch"] is True
    monkeypatch.setenv("TRAINGUARD_MODE", "sometimes")
    with pytest.raises(config.ConfigError, match="--mode / TRAINGUARD_MODE"):
        parse("operator")


def test_run_needs_a_scheduler(capsys: pytest.CaptureFixture[str]) -> None:
    assert main.main(["run", "--print-config"]) == 2
    assert "--scheduler SPEC or TRAINGUARD_SCHEDULER" in capsys.readouterr().err


def test_unused_trainguard_variables_are_reported(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TRAINGUARD_MOD", "action")  # a typo must not pass silently
    assert main.main(["operator", "--print-config"]) == 0
    assert json.loads(capsys.readouterr().out)["environment"]["unused"] == ["TRAINGUARD_MOD"]


def test_builtin_default_policy_is_monitor_even_with_mode_action() -> None:
    """Two keys: the cluster-wide switch alone never makes the built-in policy act."""
    settings, _ = parse("run", "--scheduler", "slurm-local", "--mode", "action")
    assert isinstance(settings, config.RunSettings)
    policies = run_cli.load_policies(settings.policy)
    (policy,) = policies.policies
    assert policy.spec.mode == vocab.Mode.MONITOR


async def test_the_log_source_is_victorialogs_when_its_url_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    from trainguard.model import clock
    from trainguard.signals import tailbook, victorialogs

    settings, _ = parse("run", "--scheduler", "slurm-local")
    assert isinstance(settings, config.RunSettings)
    books, client = run_cli.log_source(settings)
    assert client is None and isinstance(books("w", "1", clock.ManualClock(0.0), None), tailbook.TailBook)

    monkeypatch.setenv("TRAINGUARD_VICTORIALOGS_URL", "http://127.0.0.1:9428")
    monkeypatch.setenv("TRAINGUARD_VICTORIALOGS_JOB_FIELD", "slurm_job")
    settings, _ = parse("operator", "--scheduler", "slurm-local", "--victorialogs-path-field", "file")
    assert isinstance(settings, config.OperatorSettings)
    found = run_cli.victorialogs_config(settings)
    assert found is not None and (found.url, found.job_field, found.path_field, found.host_field) == (
        "http://127.0.0.1:9428", "slurm_job", "file", "host")
    books, client = run_cli.log_source(settings)
    assert client is not None
    book = books("w", "1", clock.ManualClock(0.0), None)
    assert isinstance(book, victorialogs.VictoriaLogsBook) and book.kind != "files"
    await client.close()
