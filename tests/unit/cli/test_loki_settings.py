"""The Loki settings reach the Loki source: `--loki-url` selects it, labels and selector are the
configured ones, the tenant and the bearer token / basic-auth password (from files) become
headers, and contradictory or unreadable settings are one-line errors, not a half-started run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainguard.cli import config, main, settings_io
from trainguard.cli import run as run_cli
from trainguard.model import clock
from trainguard.signals import loki, loki_book, sources

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("TRAINGUARD_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("TRAINGUARD_HOME", str(tmp_path / "home"))


def parse(*argv: str) -> config.RunSettings:
    args = main.build_parser().parse_args(["run", "--scheduler", "slurm-local", *argv])
    settings = settings_io.load(config.RunSettings, settings_io.flags_of(args, config.RunSettings))
    assert isinstance(settings, config.RunSettings)
    return settings


async def test_loki_url_selects_the_loki_books_with_labels_and_auth(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    monkeypatch.setenv("TRAINGUARD_LOKI_TENANT", "team-a")
    cfg = parse("--loki-url", "http://loki:3100", "--loki-token-file", str(token), "--loki-job-label", "slurm_job",
                "--loki-host-label", "node", "--loki-selector", 'cluster="gpu-a"')
    books, client = run_cli.log_source(cfg)
    assert isinstance(client, loki.LokiClient)
    try:
        book = books("slurm/c/7", "7", clock.ManualClock(0.0), None)
        assert isinstance(book, loki_book.LokiBook)
        assert book.reader.query == '{slurm_job="7", cluster="gpu-a"}'
        assert book.reader.labels.host == "node"
        assert client._headers == {"X-Scope-OrgID": "team-a", "Authorization": "Bearer s3cret"}
    finally:
        await client.close()
    assert run_cli.log_source(parse())[0] is sources.file_books


def test_basic_auth_password_from_a_file(tmp_path: Path) -> None:
    password = tmp_path / "pw"
    password.write_text("pw\n")
    cfg = parse("--loki-url", "http://loki:3100", "--loki-username", "tg", "--loki-password-file", str(password))
    assert cfg.loki_secrets() == (None, "pw")


def test_contradictions_and_unreadable_secrets_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(config.ConfigError, match="give one log store"):
        parse("--loki-url", "http://loki:3100", "--victorialogs-url", "http://vl:9428")
    with pytest.raises(config.ConfigError, match="give one Loki authentication"):
        parse("--loki-url", "http://l", "--loki-username", "u", "--loki-token-file", str(tmp_path / "t"))
    cfg = parse("--loki-url", "http://loki:3100", "--loki-token-file", str(tmp_path / "missing"))
    with pytest.raises(run_cli._Fatal, match="loki_token_file: cannot read"):
        run_cli.log_source(cfg)


def test_the_operator_reads_the_same_loki_settings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = main.build_parser().parse_args(["operator", "--scheduler", "slurm-local", "--loki-url", "http://loki:3100",
                                           "--loki-host-label", "node"])
    settings = settings_io.load(config.OperatorSettings, settings_io.flags_of(args, config.OperatorSettings))
    found = run_cli.loki_config(settings)
    assert found is not None and (found.url, found.labels.host, found.labels.job) == ("http://loki:3100", "node",
                                                                                      "job_id")
    # An unreadable secret file stops `trainguard operator` with one line, before kopf starts.
    code = main.main(["operator", "--scheduler", "slurm-local", "--loki-url", "http://loki:3100",
                      "--loki-token-file", str(tmp_path / "missing")])
    err = capsys.readouterr().err
    assert code == 2 and "loki_token_file: cannot read" in err and len(err.strip().splitlines()) == 1
