"""The status coalescer (k8s/coalesce.py): latest state per key, urgent first, a bounded write rate."""

from __future__ import annotations

import asyncio

import pytest

from trainguard.k8s import coalesce


async def test_many_marks_of_one_key_are_one_write_and_a_failed_write_stays_dirty() -> None:
    writer = coalesce.StatusCoalescer(interval_s=1.0, settle_s=0.0, max_writes_per_s=1000)
    written: list[str] = []
    failing = {"b"}

    async def write(key: str) -> None:
        if key in failing:
            raise RuntimeError("API unreachable")
        written.append(key)

    for _ in range(50):
        writer.mark("a")
    writer.mark("b")
    writer.mark("c", urgent=True)
    assert await writer.flush(write) == 2
    assert written == ["c", "a"]  # urgent first, each key once
    assert writer.pending() == 1 and writer.stats.failures == 1
    failing.clear()
    assert await writer.flush(write) == 1 and written[-1] == "b"
    assert writer.pending() == 0


async def test_the_write_rate_stays_within_the_budget() -> None:
    now = [0.0]

    def monotonic() -> float:
        return now[0]

    writer = coalesce.StatusCoalescer(interval_s=100.0, settle_s=0.0, max_writes_per_s=10, monotonic=monotonic)
    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def fake_sleep(seconds: float) -> None:  # the bucket's waits advance the injected clock
        slept.append(seconds)
        now[0] += seconds
        await real_sleep(0)

    async def write(key: str) -> None:
        return None

    for i in range(35):
        writer.mark(f"k{i}")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(coalesce.asyncio, "sleep", fake_sleep)
        assert await writer.flush(write) == 35
    assert now[0] == pytest.approx(2.5, abs=0.05)  # a burst of 10, then 10 per second: 25 more in 2.5 s
