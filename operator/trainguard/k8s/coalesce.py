"""Coalesced WorkloadRecovery status writes: the latest state per object, at a bounded rate.

Place in the loop: between the engine's records and the API server. One incident produces a
burst of records for one workload (anomaly, verdict, advice, each executor step, outcome) within a
second, and 10,000 workloads produce far more changes than an API server should take as writes.
The status is a projection of the engine's state (``k8s/status.py``), so only the latest state of
each object matters: a record only marks its workload *dirty*; a flusher writes dirty objects

- on a timer (``interval_s``), for ordinary changes;
- soon after an important transition (``urgent``: an advice or an outcome, a new object), after a
  short ``settle_s`` that lets the rest of the burst join the same write;
- never faster than ``max_writes_per_s`` in total (a token bucket; what does not fit waits, still
  dirty, and its later changes join it).

A write that fails leaves the object dirty for the next flush. The projection is computed at write
time from the engine, so a status written late is exact, never a stale intermediate state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

logger = logging.getLogger(__name__)


@dataclass
class CoalesceStats:
    """Counters for logs, the benchmark and tests."""

    marks: int = 0
    """Changes reported (records and reconcile differences)."""
    writes: int = 0
    """Flushed objects (each one read + at most one status patch)."""
    failures: int = 0
    flushes: int = 0


class StatusCoalescer:
    """Dirty set + flusher with a global write budget."""

    def __init__(self, *, interval_s: float = 2.0, settle_s: float = 0.2, max_writes_per_s: float = 50.0,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        if interval_s <= 0 or settle_s < 0 or max_writes_per_s <= 0:
            raise ValueError("need interval_s > 0, settle_s >= 0 and max_writes_per_s > 0")
        self.interval_s = interval_s
        self.settle_s = settle_s
        self.max_writes_per_s = max_writes_per_s
        self._monotonic = monotonic
        self._dirty: dict[str, bool] = {}
        """Key -> urgent; insertion order = order of first change (oldest written first)."""
        self._urgent = asyncio.Event()
        self._tokens = max_writes_per_s
        self._filled_at = monotonic()
        self.stats = CoalesceStats()

    def mark(self, key: str, *, urgent: bool = False) -> None:
        """``key``'s object changed; an urgent change is written within ``settle_s`` (budget allowing)."""
        self.stats.marks += 1
        self._dirty[key] = self._dirty.get(key, False) or urgent
        if urgent:
            self._urgent.set()

    def pending(self) -> int:
        return len(self._dirty)

    async def _budget(self) -> None:
        """Take one write from the token bucket (burst: one second's worth), waiting for it if empty."""
        while True:
            now = self._monotonic()
            self._tokens = min(self.max_writes_per_s, self._tokens + (now - self._filled_at) * self.max_writes_per_s)
            self._filled_at = now
            if self._tokens >= 1 - 1e-9:  # rounding of the refill must not leave it a hair short forever
                self._tokens = max(0.0, self._tokens - 1)
                return
            await asyncio.sleep(max((1 - self._tokens) / self.max_writes_per_s, 0.001))

    async def flush(self, write: Callable[[str], Awaitable[object]], *, urgent_only: bool = False) -> int:
        """Write the dirty objects (urgent ones first); returns how many were written."""
        self.stats.flushes += 1
        keys = sorted(self._dirty, key=lambda k: not self._dirty[k])
        if urgent_only:
            keys = [k for k in keys if self._dirty[k]]
        # One interval's budget per flush, so that urgent changes marked meanwhile go first in the next.
        keys = keys[:max(1, int(self.max_writes_per_s * self.interval_s))]
        done = 0
        for key in keys:
            if key not in self._dirty:
                continue
            await self._budget()
            del self._dirty[key]  # a change from here on marks it again: written in a later flush
            try:
                await write(key)
            except asyncio.CancelledError:
                self._dirty.setdefault(key, True)
                raise
            except Exception as exc:
                self.stats.failures += 1
                self._dirty.setdefault(key, False)
                logger.warning("status of %s not written (retried in the next flush): %s", key, exc)
                continue
            self.stats.writes += 1
            done += 1
        return done

    async def run(self, stop: asyncio.Event, write: Callable[[str], Awaitable[object]]) -> None:
        """Flush every ``interval_s`` and shortly after urgent marks until ``stop``; then once more."""
        next_full = self._monotonic() + self.interval_s
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._urgent.wait(), timeout=max(0.0, next_full - self._monotonic()))
            if stop.is_set():
                break
            if self._urgent.is_set() and self._monotonic() < next_full:
                if self.settle_s:
                    await asyncio.sleep(self.settle_s)  # the rest of the burst joins this write
                self._urgent.clear()
                await self.flush(write, urgent_only=True)
                continue
            self._urgent.clear()
            next_full = self._monotonic() + self.interval_s
            await self.flush(write)
        with contextlib.suppress(Exception):
            await self.flush(write)
