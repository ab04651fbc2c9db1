"""LocalRunner refuses what it may not run, before any process is started."""

from __future__ import annotations

import pytest

from trainguard.schedulers import base, runner


def test_missing_binary_is_a_clear_error_at_construction(tmp_path: object) -> None:
    with pytest.raises(base.SchedulerError, match="'scontrol' not found on PATH"):
        runner.LocalRunner(path=str(tmp_path))


async def test_only_allowed_binaries_run(tmp_path: object) -> None:
    r = runner.LocalRunner(binaries=(), path=str(tmp_path))
    with pytest.raises(base.SchedulerError, match="may execute"):
        await r.run(["rm", "-rf", "/"])
    assert r.stats.calls == {} and r.stats.failures == {}
