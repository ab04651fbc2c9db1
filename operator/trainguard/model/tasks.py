"""Background tasks whose failure is logged, not lost: the one spawner of the engine and its shells.

An ``asyncio`` task that nobody awaits swallows its exception until it is garbage-collected (and
then only says "Task exception was never retrieved"). Every fire-and-forget task of Trainguard (a
recovery, a status write, a watch) is started here, named for the logs, and logged when it fails.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

logger = logging.getLogger("trainguard.tasks")


def spawn(coro: Awaitable[None], name: str, keep: set[asyncio.Task[None]] | None = None) -> asyncio.Task[None]:
    """Start ``coro`` as a task named ``name``; log its exception if it fails. With ``keep``, the task
    is held in that set until it ends (a strong reference, so it is not collected mid-flight, and a
    set the owner can cancel on shutdown)."""
    task: asyncio.Task[None] = asyncio.ensure_future(coro)
    task.set_name(name)
    if keep is not None:
        keep.add(task)
        task.add_done_callback(keep.discard)
    task.add_done_callback(log_failure)
    return task


def log_failure(task: asyncio.Task[None]) -> None:
    """Done-callback: log the task's exception, if it ended with one (cancellation is not a failure)."""
    if not task.cancelled() and task.exception() is not None:
        logger.error("task %s failed", task.get_name(), exc_info=task.exception())


def busy(task: asyncio.Task[None] | None) -> bool:
    """Whether ``task`` is still running (a recovery in flight): the one spelling of that test."""
    return task is not None and not task.done()
