"""Time as an injected dependency, so detectors, policy and watchdog are testable without sleeping."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Wall-clock seconds since the epoch (UTC), as ``time.time()``."""

    def now(self) -> float: ...


class SystemClock:
    """The real clock."""

    def now(self) -> float:
        return time.time()


class ManualClock:
    """A clock that moves only when told to; for tests and for replaying recorded signals."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"cannot move a clock backwards ({seconds} s)")
        self._now += seconds

    def set(self, when: float) -> None:
        self._now = when
