"""`trainguard operator` hands every engine setting it accepts to its engine: the journal's retention
and size cap (``--journal-retention-days``, ``--journal-max-bytes``) were accepted and dropped, so the
operator's journal always kept the defaults."""

from __future__ import annotations

import pytest

from trainguard.cli import main
from trainguard.k8s import operator

pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("clean_env")]


def test_the_journal_flags_reach_the_operators_engine_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[operator.OperatorConfig] = []

    def fake_main(config: operator.OperatorConfig) -> int:  # kopf is not started: the settings are the point
        started.append(config)
        return 0

    monkeypatch.setattr(operator, "main", fake_main)
    code = main.main(["operator", "--scheduler", "slurm-local", "--journal-retention-days", "3",
                      "--journal-max-bytes", "50000", "--max-nodes-out", "2"])
    assert code == 0 and len(started) == 1
    settings = started[0].engine
    assert settings.journal_retention_s == 3 * 86400.0
    assert settings.journal_max_bytes == 50_000
    assert settings.max_nodes_out == 2  # a setting that always arrived, beside them


def test_without_the_flags_the_operator_keeps_the_engines_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[operator.OperatorConfig] = []
    monkeypatch.setattr(operator, "main", lambda config: started.append(config) or 0)
    assert main.main(["operator", "--scheduler", "slurm-local"]) == 0
    settings = started[0].engine
    defaults = type(settings)()
    assert (settings.journal_retention_s, settings.journal_max_bytes) == (defaults.journal_retention_s,
                                                                          defaults.journal_max_bytes)


def test_run_and_operator_build_the_same_engine_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """One mapping from the command's settings to the engine's (``cli.common.engine_settings``): the same
    flags give ``run``'s engine and every operator term's engine the same settings."""
    import asyncio
    from typing import Any

    from trainguard import settings as settings_mod
    from trainguard.cli import common

    built: list[settings_mod.EngineSettings] = []
    real = common.engine_settings

    def spy(cfg: Any) -> settings_mod.EngineSettings:
        built.append(real(cfg))
        return built[-1]

    def no_loop(coroutine: Any) -> int:  # the engine is not started: its settings are the point
        coroutine.close()
        return 0

    started: list[operator.OperatorConfig] = []
    monkeypatch.setattr(common, "engine_settings", spy)
    monkeypatch.setattr(asyncio, "run", no_loop)
    monkeypatch.setattr(operator, "main", lambda config: started.append(config) or 0)
    flags = ["--scheduler", "slurm-local", "--mode", "action", "--poll", "0.5", "--journal-retention-days", "2",
             "--journal-max-bytes", "20000", "--max-actions-per-hour", "7", "--max-nodes-out", "3",
             "--max-nodes-out-share", "0.25"]
    assert main.main(["run", *flags]) == 0
    assert main.main(["operator", *flags]) == 0
    assert len(built) == 2 and built[0] == built[1] == started[0].engine
    assert built[0] == settings_mod.EngineSettings(
        discovery_interval_s=0.5, allow_action=True, journal_retention_s=2 * 86400.0, journal_max_bytes=20_000,
        max_actions_per_hour=7, max_nodes_out=3, max_nodes_out_share=0.25)
