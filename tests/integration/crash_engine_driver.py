"""Crash-consistency driver for the whole engine: tailing a real output file, deciding, acting.

Run by ``test_crash_consistency.py`` as a subprocess against the real audit store and the
file-backed fake scheduler (``tests/support/fake_scheduler.FileFakeScheduler``). Unlike
``crash_driver.py`` (the executor alone) the decision here comes from the job's output file
itself, so a restart must also find where reading stopped: the file keeps the old attempt's Xid
line while the requeued job is pending (and, with ``--open-mode=append``, after it runs again).

Boundaries (``--kill-at``), as in ``crash_driver.py``: ``advice``, ``intent:STEP``,
``call:OPERATION``, ``outcome``; and ``pending``: right after the outcome was recorded, with the
requeued job pending. ``none`` runs ``--rounds`` engine rounds (discovery + tailing) and exits 0.
``--start MODE`` first lets the scheduler start the pending job's next attempt on node1 and node3,
which prints healthy lines (``append``: after the old ones; ``truncate``: into an emptied file).
Prints one line: the scheduler's mutations.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.integration.crash_driver import die, install_kill_point, kill_after
from tests.support import fake_scheduler
from trainguard import engine as engine_mod
from trainguard import settings as settings_mod
from trainguard.detect import catalog as catalog_mod
from trainguard.model import clock
from trainguard.policy import loader

POLICY = """
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: act}
spec:
  mode: Action
  retries: {maxRetries: 3, maxAttemptsWithoutCheckpoint: 10, backoff: {initialSeconds: 0}}
  detection: {settle: 1s, hangTimeout: 600s}
"""
HEALTHY = ["0: iteration 7 loss 1.9", "1: iteration 7 loss 1.9"]
ROUND_S = 0.6
"""Clock advance per round: two rounds close a 1 s crash settle window."""


def start_next_attempt(scheduler: fake_scheduler.FileFakeScheduler, job_id: str, *, truncate: bool) -> None:
    """What Slurm does when the requeued job runs again; the new attempt prints healthy lines."""
    scheduler.start(job_id, ["node1", "node3"])
    output = Path(scheduler.jobs[job_id].stdout_path or "")
    with output.open("w" if truncate else "a", encoding="utf-8") as handle:
        handle.writelines(f"{line}\n" for line in HEALTHY)


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--scheduler-file", required=True, type=Path)
    parser.add_argument("--job-id", required=True)
    parser.add_argument("--kill-at", default="none")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--start", choices=["append", "truncate"])
    parser.add_argument("--clock", type=float, required=True, help="epoch seconds the run starts at")
    args = parser.parse_args()

    from trainguard.store import database

    now = clock.ManualClock(args.clock)
    store = await database.open_store(args.db)
    scheduler = fake_scheduler.FileFakeScheduler(args.scheduler_file)
    if args.kill_at == "pending":  # after the outcome, with the requeued job pending
        def pending(_stored: Any, _args: tuple[Any, ...]) -> bool:
            scheduler._load()
            return scheduler.jobs[args.job_id].state.value == "PENDING"
        store.record_outcome = kill_after(store.record_outcome, pending)  # type: ignore[method-assign]
    elif not install_kill_point(args.kill_at, store, scheduler):
        parser.error(f"unknown boundary {args.kill_at!r}")

    if args.start is not None:
        start_next_attempt(scheduler, args.job_id, truncate=args.start == "truncate")

    engine = engine_mod.Engine(
        scheduler, store, loader.parse_text(POLICY, "crash policy"), catalog_mod.load_catalog(), clock_=now,
        settings=settings_mod.EngineSettings(allow_action=True),
    )
    try:
        await engine.recover()
        for _ in range(args.rounds):
            await engine.discover()
            await engine.tail()
            for rt in list(engine.runtimes.values()):
                if rt.task is not None:
                    await rt.task
            now.advance(ROUND_S)
    finally:
        for rt in engine.runtimes.values():
            for t in rt.tailers:
                t.close()
        await store.close()
    if args.kill_at != "none":
        die()  # the boundary was never reached: die anyway, the test sees it in the mutations
    print(" ".join(m["operation"] for m in scheduler.mutations))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
