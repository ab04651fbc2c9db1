"""Health of a running engine: is its event loop alive, can it reach the scheduler and the store.

Place: beside the engine, below the shells. The engine reports the outcome of each timer round
here; the shells (``trainguard run``, ``trainguard operator``) run the heartbeat ticker and serve
the model over HTTP (``trainguard.http``): ``/healthz`` (liveness), ``/readyz`` (readiness) and
``/metrics``.

- **Liveness** is the event loop's own heartbeat: a small ticker task stamps the time once a
  second. A loop blocked by a synchronous call (a hung NFS read, a stuck C extension) stops the
  ticker, so the heartbeat goes stale and a restart is the right answer. An unreachable
  scheduler is *not* a liveness failure: restarting cannot fix it.
- **Readiness** is the reachability of the scheduler and of the audit store, each learned from the
  engine's own calls (no extra probing load on the scheduler): not ready until the first
  successful call, not ready while the last call failed, with the reason and since when.
- **Outages** are logged as one line per change of state (unreachable, then reachable again),
  never a traceback per failed round; the timer loops back off with jitter meanwhile
  (``Backoff``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import sqlalchemy.exc
from prometheus_client import CollectorRegistry, Counter, Gauge

from trainguard.model import times
from trainguard.schedulers import base

logger = logging.getLogger("trainguard.health")

SCHEDULER: Final = "scheduler"
STORE: Final = "store"
TICK_S: Final = 1.0
"""Heartbeat period of the ticker."""
LOOPS: Final = ("recover", "discover", "tail", "sweep")
"""The engine's timer loops (``Engine.run``), by the name their failed rounds are counted under."""
STALE_AFTER_S: Final = 30.0
"""A heartbeat older than this means the event loop is stuck: liveness fails. Generous, so a
busy machine (a long garbage collection, a slow start) is not taken for a stuck loop."""


def classify(exc: BaseException) -> str | None:
    """Which dependency an error says is unreachable: ``SCHEDULER``, ``STORE``, or None for an
    unexpected error (a bug: worth its traceback)."""
    if isinstance(exc, base.SchedulerError):
        return SCHEDULER
    if isinstance(exc, sqlalchemy.exc.SQLAlchemyError | ConnectionError | TimeoutError):
        # ConnectionError/TimeoutError: asyncpg's connect can raise them unwrapped when the
        # database host refuses or does not answer.
        return STORE
    return None


def one_line(exc: BaseException) -> str:
    """An error as one short line (database drivers put the SQL and a URL on further lines)."""
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}"[:300] if first else type(exc).__name__


@dataclass
class Reachability:
    """What we last learned about one dependency from our own calls to it."""

    name: str
    reachable: bool | None = None
    """None until the first call finished."""
    since: float | None = None
    """Wall time of the last change of ``reachable``."""
    last_error: str | None = None
    last_error_at: float | None = None
    failures: int = 0
    """Failed calls since it was last reachable."""

    def view(self) -> dict[str, Any]:
        return {"reachable": self.reachable, "since": self.since, "last_error": self.last_error,
                "last_error_at": self.last_error_at, "failures": self.failures}


@dataclass
class Backoff:
    """The delay before the next round of a timer loop: its interval while rounds succeed;
    doubling on each consecutive failure up to ``ceiling``, with jitter so that several loops
    (or replicas) do not retry in lockstep against a recovering scheduler."""

    interval: float
    ceiling: float = 30.0
    failures: int = 0
    rng: random.Random = field(default_factory=random.Random)

    def succeeded(self) -> float:
        self.failures = 0
        return self.interval

    def failed(self) -> float:
        self.failures += 1
        delay = min(self.interval * 2.0 ** self.failures, max(self.ceiling, self.interval))
        return delay * self.rng.uniform(0.5, 1.0)


class Metrics:
    """Prometheus metrics of the health model, on a registry of their own (no global state, so
    two engines in one process, e.g. in tests, do not collide). ``trainguard.http`` serves it."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.errors = Counter("trainguard_dependency_errors", "Failed calls to a dependency, by dependency",
                              ["dependency"], registry=self.registry)
        self.reachable = Gauge("trainguard_dependency_reachable",
                               "1 when the last call to the dependency succeeded, 0 when it failed, -1 before any",
                               ["dependency"], registry=self.registry)
        self.loop_lag = Gauge("trainguard_event_loop_lag_seconds",
                              "How late the heartbeat ticker woke up last time (event loop busy or blocked)",
                              registry=self.registry)
        self.heartbeat_age = Gauge("trainguard_heartbeat_age_seconds",
                                   "Seconds since the event loop's last heartbeat", registry=self.registry)
        self.round_errors = Counter("trainguard_loop_errors", "Failed rounds of the engine's timer loops, by loop",
                                    ["loop"], registry=self.registry)
        for name in (SCHEDULER, STORE):
            self.errors.labels(name)
            self.reachable.labels(name).set(-1)
        for loop in LOOPS:  # exported at 0 from the start: a rate over them is 0, not "no data"
            self.round_errors.labels(loop)


class Health:
    """The health model of one process (see the module docstring)."""

    def __init__(self, *, wall: Callable[[], float] = time.time, mono: Callable[[], float] = time.monotonic,
                 stale_after_s: float = STALE_AFTER_S, metrics: Metrics | None = None) -> None:
        self._wall = wall
        self._mono = mono
        self.stale_after_s = stale_after_s
        self.metrics = metrics if metrics is not None else Metrics()
        self.started_at = wall()
        self.heartbeat_at: float | None = None
        """Monotonic time of the last heartbeat."""
        self.loop_lag_s = 0.0
        self.scheduler = Reachability(SCHEDULER)
        self.store = Reachability(STORE)
        self.standby: str | None = None
        """Why this process does not run the engine right now (a replica without the Lease), or
        None. A standby is ready: it has nothing to reach, and an unready standby would block a
        rolling update of the Deployment for good."""
        self._unexpected: dict[str, str] = {}
        self.metrics.heartbeat_age.set_function(self._heartbeat_age)

    # ------------------------------------------------------------------ reports from the engine

    def reached(self, dependency: str) -> None:
        """A call to ``dependency`` succeeded."""
        item = self._item(dependency)
        self.metrics.reachable.labels(dependency).set(1)
        if item.reachable is True:
            return
        now = self._wall()
        if item.reachable is False:
            down = now - item.since if item.since is not None else 0.0
            logger.warning("%s reachable again after %.0f s (%d failed calls)", dependency, down, item.failures)
        item.reachable, item.since, item.failures = True, now, 0

    def unreachable(self, dependency: str, exc: BaseException) -> None:
        """A call to ``dependency`` failed with ``exc``."""
        item = self._item(dependency)
        now = self._wall()
        item.failures += 1
        item.last_error, item.last_error_at = one_line(exc), now
        self.metrics.errors.labels(dependency).inc()
        self.metrics.reachable.labels(dependency).set(0)
        if item.reachable is False:
            return
        logger.error("%s unreachable: %s (retrying with backoff; one line again when it is back)", dependency,
                     item.last_error)
        item.reachable, item.since = False, now

    def round_succeeded(self, loop: str, *dependencies: str) -> None:
        """A round of the timer loop ``loop`` went through; ``dependencies`` it always calls."""
        for dependency in dependencies:
            self.reached(dependency)
        if self._unexpected.pop(loop, None) is not None:
            logger.warning("%s works again", loop)

    def round_failed(self, loop: str, exc: BaseException) -> None:
        """A round of ``loop`` failed: an expected outage is one line per change of state; an
        unexpected error gets its traceback once per distinct error, not once per round."""
        self.metrics.round_errors.labels(loop).inc()
        dependency = classify(exc)
        if dependency is not None:
            self.unreachable(dependency, exc)
            return
        text = one_line(exc)
        if self._unexpected.get(loop) != text:
            self._unexpected[loop] = text
            logger.error("%s failed (retrying with backoff; logged again only if the error changes)", loop,
                         exc_info=exc)

    # ------------------------------------------------------------------ the heartbeat

    def beat(self, lag_s: float = 0.0) -> None:
        self.heartbeat_at = self._mono()
        self.loop_lag_s = max(lag_s, 0.0)
        self.metrics.loop_lag.set(self.loop_lag_s)

    async def tick_forever(self, stop: asyncio.Event, interval: float = TICK_S) -> None:
        """The heartbeat ticker: one stamp per ``interval``, and how late it woke up."""
        while not stop.is_set():
            due = self._mono() + interval
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=interval)
            self.beat(self._mono() - due)

    def _heartbeat_age(self) -> float:
        return self._mono() - self.heartbeat_at if self.heartbeat_at is not None else -1.0

    # ------------------------------------------------------------------ the probes

    def liveness(self) -> tuple[bool, dict[str, Any]]:
        """(alive, why): the heartbeat is fresh. Before the first beat the process is starting: alive."""
        age = self._heartbeat_age()
        alive = self.heartbeat_at is None or age <= self.stale_after_s
        reason = "ok" if alive else f"event loop heartbeat is {age:.0f} s old (limit {self.stale_after_s:.0f} s)"
        return alive, {"alive": alive, "reason": reason, "heartbeat_age_s": age if age >= 0 else None,
                       "loop_lag_s": self.loop_lag_s}

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """(ready, why): scheduler and store reachable (a standby replica is ready)."""
        reasons = []
        if self.standby is None:
            for item in (self.scheduler, self.store):
                if item.reachable is None:
                    reasons.append(f"{item.name}: not reached yet")
                elif not item.reachable:
                    reasons.append(f"{item.name} unreachable since {_iso(item.since)}: {item.last_error}")
        ready = not reasons
        return ready, {"ready": ready, "reasons": reasons, "standby": self.standby,
                       "scheduler": self.scheduler.view(), "store": self.store.view()}

    def _item(self, dependency: str) -> Reachability:
        if dependency == SCHEDULER:
            return self.scheduler
        if dependency == STORE:
            return self.store
        raise ValueError(f"unknown dependency {dependency!r}")


def _iso(at: float | None) -> str:
    if at is None:
        return "?"
    return times.rfc3339(times.to_datetime(at))
