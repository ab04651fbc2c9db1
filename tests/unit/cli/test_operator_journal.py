"""`trainguard operator` hands every engine setting it accepts to its engine: the journal's retention
and size cap (``--journal-retention-days``, ``--journal-max-bytes``) were accepted and dropped, so the
operator's journal always kept the defaults."""

from __future__ import annotations

import pytest

from trainguard.cli import main
from trainguard.k8s import operator
from trainguard.k8s.operator import assembly

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
    settings = assembly.engine_settings(started[0])
    assert settings.journal_retention_s == 3 * 86400.0
    assert settings.journal_max_bytes == 50_000
    assert settings.max_nodes_out == 2  # a setting that always arrived, beside them


def test_without_the_flags_the_operator_keeps_the_engines_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[operator.OperatorConfig] = []
    monkeypatch.setattr(operator, "main", lambda config: started.append(config) or 0)
    assert main.main(["operator", "--scheduler", "slurm-local"]) == 0
    settings = assembly.engine_settings(started[0])
    defaults = type(settings)()
    assert (settings.journal_retention_s, settings.journal_max_bytes) == (defaults.journal_retention_s,
                                                                          defaults.journal_max_bytes)
