"""The engine's timer loops: a round of work every interval, backing off while rounds fail.

Place: used by the facade (``core.Engine.run``), which keeps the table of timers (discovery,
tailing, the watchdog sweep, ...). A failed round never ends its loop; each round's result goes
to the health model, which is how /readyz learns that the scheduler or the store is unreachable.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from trainguard import health as health_mod

Work = Callable[[], Awaitable[None]]
"""One round of a timer; its ``__name__`` names the loop in the health model (``health.LOOPS``)."""


async def every(health: health_mod.Health, interval: float, ceiling: float, work: Work, stop: asyncio.Event,
                *reaches: str) -> None:
    """Run ``work`` every ``interval`` s until ``stop``. A failed round must not end the loop: the
    next one retries, after a backoff with jitter (up to ``ceiling`` s) while it keeps failing; the
    outage is reported to the health model (one log line per change of state). ``reaches``: the
    dependencies a successful round has certainly called (so it proves them reachable)."""
    backoff = health_mod.Backoff(interval, ceiling=max(ceiling, interval))
    while not stop.is_set():
        delay = backoff.succeeded() if await one_round(health, work, reaches) else backoff.failed()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=delay)


async def until_done(health: health_mod.Health, interval: float, ceiling: float, work: Work, stop: asyncio.Event,
                     *reaches: str) -> bool:
    """Run ``work`` until one round succeeds (True) or ``stop`` is set (False), backing off."""
    backoff = health_mod.Backoff(interval, ceiling=max(ceiling, interval))
    while not stop.is_set():
        if await one_round(health, work, reaches):
            return True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=backoff.failed())
    return False


async def one_round(health: health_mod.Health, work: Work, reaches: tuple[str, ...]) -> bool:
    """One round of ``work``, its result reported to the health model; True when it succeeded."""
    try:
        await work()
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        health.round_failed(getattr(work, "__name__", "work"), exc)
        return False
    health.round_succeeded(getattr(work, "__name__", "work"), *reaches)
    return True
