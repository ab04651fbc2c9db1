"""A tracked workload whose output cannot be read is reported (error log, the
``trainguard_unreadable_workloads`` gauge, ``Engine.unreadable``), never silently unmonitored;
it is followed again as soon as the file can be read."""

from __future__ import annotations

import logging

import pytest

from tests.unit.engine import scenario


async def test_an_unreadable_output_is_reported_then_followed_once_readable(
    make_harness: scenario.MakeHarness, caplog: pytest.LogCaptureFixture
) -> None:
    h = await make_harness()
    h.submit("1")
    h.submit("2")
    h.output("2").mkdir()  # the open fails (EISDIR) as it would at the descriptor limit
    h.write("1", "step 1")
    with caplog.at_level(logging.ERROR, logger="trainguard.engine"):
        await h.step()
    workload = scenario.workload_of("2")
    assert list(h.engine.unreadable) == [workload]
    assert "cannot open" in h.engine.unreadable[workload]
    assert h.engine.metrics.registry.get_sample_value("trainguard_unreadable_workloads") == 1
    assert any(workload in r.getMessage() and "NOT monitored" in r.getMessage() for r in caplog.records)

    h.output("2").rmdir()
    h.write("2", *scenario.ranked(0, scenario.XID_79))
    await h.step(1.0)
    assert h.engine.unreadable == {}
    assert h.engine.metrics.registry.get_sample_value("trainguard_unreadable_workloads") == 0
    await h.settle()
    assert "anomaly" in await h.kinds("2")
