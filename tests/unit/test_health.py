"""The health model: one log line per change of reachability, never a traceback for an expected
outage, readiness with its reasons, liveness from the heartbeat, backoff with a ceiling (the
engine's loops reporting into it: tests/unit/engine/test_engine_outages.py)."""

from __future__ import annotations

import asyncio
import logging

import pytest
import sqlalchemy.exc

from trainguard import health as health_mod
from trainguard.schedulers import base

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def outage_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "trainguard.health"]


def test_one_line_per_change_of_state(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    clock = Clock()
    health = health_mod.Health(wall=clock, mono=clock)
    health.round_succeeded("discover", health_mod.SCHEDULER)
    for _ in range(5):
        clock.now += 1
        health.round_failed("discover", base.SchedulerError("squeue: Unable to contact slurm controller"))
    clock.now += 10
    health.round_succeeded("discover", health_mod.SCHEDULER)
    health.round_succeeded("discover", health_mod.SCHEDULER)
    lines = outage_lines(caplog)
    assert [r.levelname for r in lines] == ["ERROR", "WARNING"]
    assert "scheduler unreachable: SchedulerError: squeue: Unable to contact" in lines[0].getMessage()
    assert "scheduler reachable again after 14 s (5 failed calls)" in lines[1].getMessage()
    assert all(r.exc_info is None for r in caplog.records), "an expected outage must not log a traceback"
    assert health.metrics.errors.labels("scheduler")._value.get() == 5


def test_store_errors_are_an_outage_of_the_store(caplog: pytest.LogCaptureFixture) -> None:
    health = health_mod.Health()
    error = sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("connection refused\nmore detail"))
    health.round_failed("sweep", error)
    health.round_failed("sweep", error)
    ready, why = health.readiness()
    assert not ready
    assert why["store"]["reachable"] is False and "\n" not in why["store"]["last_error"]
    assert len([r for r in outage_lines(caplog) if r.levelname == "ERROR"]) == 1
    assert all(r.exc_info is None for r in caplog.records)


def test_an_unexpected_error_keeps_its_traceback_once(caplog: pytest.LogCaptureFixture) -> None:
    health = health_mod.Health()
    for _ in range(3):
        health.round_failed("tail", KeyError("bug"))
    with_trace = [r for r in caplog.records if r.exc_info is not None]
    assert len(with_trace) == 1


def test_readiness_needs_both_dependencies_reached() -> None:
    health = health_mod.Health()
    ready, why = health.readiness()
    assert not ready and why["reasons"] == ["scheduler: not reached yet", "store: not reached yet"]
    health.round_succeeded("recover", health_mod.SCHEDULER, health_mod.STORE)
    assert health.readiness()[0]
    health.standby = "not holding the Lease trainguard"
    health.round_failed("discover", base.SchedulerError("down"))
    assert health.readiness()[0], "a standby replica has nothing to reach: ready"


def test_liveness_follows_the_heartbeat() -> None:
    clock = Clock()
    health = health_mod.Health(wall=clock, mono=clock, stale_after_s=30)
    assert health.liveness()[0], "starting: alive"
    health.beat(0.2)
    clock.now += 29
    assert health.liveness()[0]
    clock.now += 2
    alive, why = health.liveness()
    assert not alive and "heartbeat is 31 s old" in why["reason"]
    health.round_failed("discover", base.SchedulerError("down"))
    health.beat()
    assert health.liveness()[0], "an unreachable scheduler is not a liveness failure"


def test_backoff_grows_with_jitter_up_to_the_ceiling() -> None:
    backoff = health_mod.Backoff(1.0, ceiling=30.0)
    delays = [backoff.failed() for _ in range(10)]
    assert all(0.5 <= d <= 30.0 for d in delays)
    assert max(delays[6:]) > 8 * max(delays[:1])
    assert backoff.succeeded() == 1.0 and backoff.failures == 0


async def test_ticker_beats() -> None:
    health = health_mod.Health()
    stop = asyncio.Event()
    beat = health.beat

    def beat_then_stop(lag_s: float = 0.0) -> None:
        beat(lag_s)
        stop.set()

    health.beat = beat_then_stop  # type: ignore[method-assign]
    async with asyncio.timeout(60):
        await health.tick_forever(stop, interval=0.01)
    assert health.heartbeat_at is not None
    assert health.liveness()[0]
