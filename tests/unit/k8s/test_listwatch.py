"""The one list+watch loop (k8s/listwatch.py): a 410 lists again at once, other failures wait with a
doubling backoff (or the wait the caller names), a watch that ends is watched again from its version."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from trainguard.k8s import client, listwatch

pytestmark = pytest.mark.unit


async def test_the_loop_lists_watches_and_recovers_as_each_end_asks() -> None:
    calls: list[str] = []
    waits: list[float] = []
    script = iter(["gone", "ok", "end", "boom", "boom", "stop"])

    async def relist() -> str:
        calls.append("list")
        return "10"

    async def watch(version: str) -> str:
        step = next(script)
        calls.append(f"watch@{version}:{step}")
        if step == "gone":
            raise client.ApiException(status=410, reason="Expired")
        if step == "boom":
            raise OSError("connection reset")
        if step == "stop":
            raise asyncio.CancelledError
        return "11" if step == "ok" else ""

    def failed(exc: Exception, delay: float) -> float | None:
        waits.append(delay)
        return None

    real_sleep = asyncio.sleep
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        await real_sleep(0)

    with pytest.MonkeyPatch.context() as patch, contextlib.suppress(asyncio.CancelledError):
        patch.setattr(asyncio, "sleep", sleep)
        await listwatch.list_watch_forever(relist, watch, failed, backoff=listwatch.Backoff(1.0, 3.0))
    assert calls == ["list", "watch@10:gone",  # 410: listed again at once, no wait
                     "list", "watch@10:ok", "watch@11:end",  # watched again from the version it returned
                     "list", "watch@10:boom", "list", "watch@10:boom", "list", "watch@10:stop"]
    assert waits == [2.0, 3.0]  # the backoff doubles, up to max_s
    assert slept == [1.0, 1.0, 2.0, 3.0]  # first_s after each watch that ended by itself


async def test_a_wait_the_caller_names_replaces_the_backoff() -> None:
    attempts = 0

    async def relist() -> str:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise client.ApiException(status=404, reason="Not Found")
        raise asyncio.CancelledError

    async def watch(version: str) -> str:
        return version

    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        await real_sleep(0)

    with pytest.MonkeyPatch.context() as patch, contextlib.suppress(asyncio.CancelledError):
        patch.setattr(asyncio, "sleep", sleep)
        await listwatch.list_watch_forever(relist, watch, lambda exc, delay: 30.0)
    assert slept == [30.0] and attempts == 2
