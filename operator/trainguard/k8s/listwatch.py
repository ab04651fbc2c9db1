"""The one list+watch loop of our Kubernetes watches: list, watch from the listing, again on any end.

Place: under the adapters that keep a view of the cluster from a watch: the Kubernetes workload
adapter's cache (``kubejobs/watching.py``: workloads, their pods, nodes) and the pod-log books
(``podlogs.py``: a workload's pods). Each says how to list (replacing what it holds) and how to
watch from a resourceVersion; this loop owns what they shared, written once:

- an expired resourceVersion (HTTP 410, ``client.is_gone``, from the listing or the watch) lists
  again at once;
- any other failure is the caller's to report (``failed``) and waits with a doubling backoff, or the
  fixed time ``failed`` returns, before listing again;
- a watch that ends by itself (its ``timeoutSeconds``) is watched again from the version it
  returns after ``first_s`` (a server that ends every watch at once must not be hammered); it
  returns "" to be listed again instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from trainguard.k8s import client


@dataclass(frozen=True)
class Backoff:
    """Waits between two tries after a failure: ``first_s``, doubled up to ``max_s``."""

    first_s: float = 0.5
    max_s: float = 30.0


async def list_watch_forever(
    relist: Callable[[], Awaitable[str]],
    watch: Callable[[str], Awaitable[str]],
    failed: Callable[[Exception, float], float | None],
    *,
    backoff: Backoff = Backoff(),
    errors: tuple[type[Exception], ...] = (Exception,),
) -> None:
    """Until cancelled: ``relist()`` (returns the listing's resourceVersion), then ``watch(version)``
    (applies events until the watch ends; returns the version to watch on from, "" to list again).
    An exception of ``errors`` other than a 410 is handed to ``failed`` with the backoff's next wait;
    it logs it and returns how long to wait instead (None: that wait); others end the loop."""
    version, delay = "", backoff.first_s
    while True:
        wait: float | None = None
        try:
            if not version:
                version = await relist()
            version = await watch(version)
            delay = backoff.first_s
        except asyncio.CancelledError:
            raise
        except errors as exc:
            version = ""
            if client.is_gone(exc):
                continue  # the resourceVersion is too old: list again, now
            wait = failed(exc, delay)
        if wait is not None:
            await asyncio.sleep(wait)
            continue
        await asyncio.sleep(delay)
        delay = min(delay * 2, backoff.max_s)


async def response_lines(response: Any) -> AsyncIterator[bytes]:
    """The lines of a watch response (one JSON event each, however long: the apiserver bounds an object)."""
    pending = bytearray()
    async for chunk in response.content.iter_any():
        pending += chunk
        while (nl := pending.find(b"\n")) >= 0:
            yield bytes(pending[:nl])
            del pending[:nl + 1]
    if pending.strip():
        yield bytes(pending)
