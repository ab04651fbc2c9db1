"""Crash-consistency driver: one recovery (advice -> executor) that can SIGKILL itself at a boundary.

Run by ``test_crash_consistency.py`` as a subprocess against the real audit store and the
file-backed fake scheduler (``tests/support/fake_scheduler.FileFakeScheduler``), so both
survive the kill. The kill is injected here, by wrapping methods of the store and the
scheduler from the outside; production code has no test switch.

Boundaries (``--kill-at``):
  advice            right after the advice row was committed
  intent:STEP       right after the intent row of STEP (e.g. requeue_hold) was committed
  call:OPERATION    right after the scheduler performed OPERATION, before its result is recorded
  outcome           right before the outcome is recorded
  none              run to the end (the restart)

Like an engine start, every run first lets the watchdog recover, then reconciles the advice.
Prints the disposition; exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support import fake_scheduler
from trainguard.act import executor
from trainguard.model import actions, advice, clock, vocab
from trainguard.store import database

WORKLOAD = "slurm/crash/1001"
JOB_ID = "1001"


def die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def kill_after(method: Callable[..., Awaitable[Any]], when: Callable[[Any, tuple[Any, ...]], bool]) -> Any:
    @functools.wraps(method)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = await method(*args, **kwargs)
        if when(result, args):
            die()
        return result

    return wrapper


def kill_before(method: Callable[..., Awaitable[Any]]) -> Any:
    @functools.wraps(method)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        die()
        return await method(*args, **kwargs)

    return wrapper


def install_kill_point(kill_at: str, store: Any, scheduler: Any) -> bool:
    """Make the process die at ``kill_at`` (``advice``, ``intent:STEP``, ``call:OPERATION``,
    ``outcome`` or ``none``); False for a boundary this function does not know."""
    boundary, _, name = kill_at.partition(":")
    if boundary == "advice":
        store.record_advice = kill_after(store.record_advice, lambda written, _: written)
    elif boundary == "intent":
        store.begin_action = kill_after(
            store.begin_action, lambda row, _: row.step == name and row.status is actions.ActionStatus.INTENT)
    elif boundary == "call":
        setattr(scheduler, name, kill_after(getattr(scheduler, name), lambda _result, _args: True))
    elif boundary == "outcome":
        store.record_outcome = kill_before(store.record_outcome)
    elif boundary != "none":
        return False
    return True


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--scheduler-file", required=True, type=Path)
    parser.add_argument("--deadline", required=True, type=float)
    parser.add_argument("--kill-at", default="none")
    parser.add_argument("--clock-offset", type=float, default=0.0,
                        help="run this many seconds in the future (a restart after the deadline)")
    args = parser.parse_args()

    now = clock.ManualClock(clock.SystemClock().now() + args.clock_offset)
    store = await database.open_store(args.db)
    scheduler = fake_scheduler.FileFakeScheduler(args.scheduler_file)
    if not install_kill_point(args.kill_at, store, scheduler):
        parser.error(f"unknown boundary {args.kill_at!r}")

    try:
        await store.upsert_workload(workload=WORKLOAD, scheduler=scheduler.name, job_id=JOB_ID, policy="default",
                                    comment="trainguard", at=now.now())
        item = advice.Advice(workload=WORKLOAD, attempt=0, generation=1, action=vocab.AdviceAction.REQUEUE,
                             exclude_nodes=["node2"], reasons=["hardware: Xid 79 on node2"],
                             mode=vocab.Mode.ACTION, deadline=args.deadline, policy="default")
        runner = executor.Executor(scheduler, store, now)
        await runner.watchdog.recover()
        disposition = await runner.reconcile(item)
    finally:
        await store.close()
    print(disposition.value)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
