"""The engine's timer loops while the scheduler is unreachable: back off, report to the health
model (one line when it goes, one when it is back), never a traceback, and carry on."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from tests.unit.engine import scenario
from trainguard.schedulers import base

pytestmark = pytest.mark.unit


async def test_engine_loops_report_an_unreachable_scheduler_once(
    make_harness: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The engine's discovery loop against a scheduler that refuses: one line when it goes, one when
    it is back, no traceback, readiness false meanwhile, and the loop keeps going."""
    caplog.set_level(logging.INFO)
    h: scenario.Harness = await make_harness(discovery_interval_s=0.01, sweep_interval_s=0.01, tail_interval_s=0.01,
                                             max_backoff_s=0.05)
    h.scheduler.fail["list_jobs"] = base.SchedulerError("squeue: Unable to contact slurm controller (connect failure)")
    failed_often, back = asyncio.Event(), asyncio.Event()
    health = h.engine.health
    unreachable, reached = health.unreachable, health.reached

    def count_failure(dependency: str, exc: BaseException) -> None:
        unreachable(dependency, exc)
        if health.scheduler.failures >= 5:
            failed_often.set()

    def note_back(dependency: str) -> None:
        reached(dependency)
        if health.scheduler.reachable is True:
            back.set()

    health.unreachable = count_failure  # type: ignore[method-assign]
    health.reached = note_back  # type: ignore[method-assign]
    stop = asyncio.Event()
    task = asyncio.ensure_future(h.engine.run(stop))
    try:
        async with asyncio.timeout(60):
            await failed_often.wait()
            assert not health.readiness()[0]
            back.clear()
            del h.scheduler.fail["list_jobs"]
            await back.wait()
    finally:
        stop.set()
        await task
    assert h.engine.health.readiness()[0]
    assert all(r.exc_info is None for r in caplog.records), [r.getMessage() for r in caplog.records if r.exc_info]
    lines = [r.getMessage() for r in [r for r in caplog.records if r.name == "trainguard.health"]]
    assert len([m for m in lines if "scheduler unreachable" in m]) == 1, lines
    assert len([m for m in lines if "scheduler reachable again" in m]) == 1, lines
