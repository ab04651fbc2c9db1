"""Benchmark: N of M workloads fail within one second; how many are acted on against each cap.

Runs the real ``Engine`` in Action mode (the built-in catalog, a policy of its own) over
``--workloads M`` opted-in RUNNING jobs of the engine tests' ``FakeScheduler`` (our Scheduler
Protocol held in memory, as ``scale.py`` uses it), with the real audit store (SQLite in a temporary
folder, or PostgreSQL with ``--db postgres``) and real output files. ``--failures N`` of them print a
Python traceback and end FAILED at random moments within one second. Each mutating scheduler call
takes ``--latency`` seconds (default 0.2: the latency at which the former check-then-act limit let
every one of them through), so recoveries decided together overlap.

Two runs, each on a fresh store:

- ``policy``: the policy's ``blastRadius.maxActionsPerHour`` is ``--per-hour`` (default 2), the
  administrator's caps are off;
- ``cap``: the policy allows 10000, the administrator's ``max_actions_per_hour`` is ``--cap``
  (default 5): when it refuses, the breaker opens and stops every further step.

It prints one JSON object with, per run: ``maximum`` (the limit), ``acted`` (workloads requeued),
``refused`` (outcomes blocked by a limit), ``stopped`` (generations closed because a key or the breaker
was off), ``breaker_open``, ``first_action_s`` (first failure written -> first scheduler mutation)
and ``closed_s`` (first failure -> every failed workload's first generation closed). ``acted`` must
not exceed ``maximum``; exit 1 when it does, 2 on a setup error.

    .venv/bin/python benchmarks/correlated_failures.py [--workloads 50] [--failures 20] [--latency 0.2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.support import fake_scheduler  # noqa: E402  (the repository root must be importable first)
from trainguard import engine as engine_mod  # noqa: E402
from trainguard import settings as settings_mod  # noqa: E402
from trainguard.act import switch  # noqa: E402
from trainguard.detect import catalog as catalog_mod  # noqa: E402
from trainguard.model import clock, vocab, workloads  # noqa: E402
from trainguard.policy import loader  # noqa: E402
from trainguard.store import database  # noqa: E402

POLICY = """
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: bench}
spec:
  mode: Action
  retries: {maxRetries: 3, maxAttemptsWithoutCheckpoint: 10, backoff: {initialSeconds: 0}}
  exclusion: {lemonNodeThreshold: 1000}
  blastRadius: {maxActionsPerHour: PER_HOUR}
"""
TRACEBACK = ("Traceback (most recent call last):", '  File "train.py", line 10, in <module>',
             "ValueError: shapes (4,) and (5,) not aligned")
NODES = 16
WAIT_S = 120.0


class SlowScheduler(fake_scheduler.FakeScheduler):
    """The in-memory scheduler whose mutating calls take ``latency`` seconds, each timed."""

    def __init__(self, latency: float, nodes: list[str]) -> None:
        super().__init__(nodes=nodes)
        self.latency = latency
        self.mutated_at: list[tuple[float, str, str]] = []

    async def _slow(self, operation: str, job_id: str) -> None:
        await asyncio.sleep(self.latency)
        self.mutated_at.append((time.time(), operation, job_id))

    async def requeue(self, job_id: str) -> None:
        await self._slow("requeue", job_id)
        await super().requeue(job_id)

    async def requeue_hold(self, job_id: str) -> None:
        await self._slow("requeue_hold", job_id)
        await super().requeue_hold(job_id)

    async def release(self, job_id: str) -> None:
        await self._slow("release", job_id)
        await super().release(job_id)

    async def cancel(self, job_id: str) -> None:
        await self._slow("cancel", job_id)
        await super().cancel(job_id)


async def one_run(args: argparse.Namespace, folder: Path, name: str, *, per_hour: int,
                  cap: int | None) -> dict[str, Any]:
    await asyncio.to_thread(folder.mkdir, parents=True)
    run_id = f"{os.getpid()}-{name}-{int(time.time())}"
    if args.db == "postgres":
        url = os.environ.get("TG_PG_URL")
        if not url:
            raise SystemExit("--db postgres needs TG_PG_URL (hack/local-postgres.sh up; source .local/postgres/env)")
    else:
        url = f"sqlite+aiosqlite:///{folder / 'audit.db'}"
    store = await database.open_store(url)
    scheduler = SlowScheduler(args.latency, [f"node{i}" for i in range(NODES)])
    closed: dict[str, float] = {}

    async def listener(kind: str, workload: str, payload: dict[str, object]) -> None:
        if kind == vocab.AuditKind.OUTCOME:
            closed.setdefault(workload, time.time())

    settings = settings_mod.EngineSettings(discovery_interval_s=0.5, tail_interval_s=0.25, sweep_interval_s=1.0,
                                           allow_action=True, max_actions_per_hour=cap, max_nodes_out_share=None)
    engine = engine_mod.Engine(scheduler, store, loader.parse_text(POLICY.replace("PER_HOUR", str(per_hour)), name),
                               catalog_mod.load_catalog(), clock_=clock.SystemClock(), settings=settings,
                               listeners=[listener])
    names = [f"slurm/corr-{run_id}/{i}" for i in range(args.workloads)]
    for i, workload in enumerate(names):
        path = folder / f"{i}.out"
        path.write_text("step 1\n")
        scheduler.jobs[str(i)] = workloads.JobSnapshot(
            workload=workload, job_id=str(i), name=f"train-{i}", state=workloads.JobState.RUNNING,
            nodes=[f"node{i % NODES}"], comment="trainguard policy=bench", stdout_path=str(path))
    stop = asyncio.Event()
    task = asyncio.create_task(engine.run(stop))
    try:
        await _until(lambda: sum(1 for rt in engine.runtimes.values() if rt.ready) >= args.workloads,
                     "every workload tracked")
        rng = random.Random(args.seed)
        failing = sorted(rng.sample(range(args.workloads), args.failures))
        offsets = sorted(rng.uniform(0.0, 1.0) for _ in failing)
        first_failure = time.time()
        for index, offset in zip(failing, offsets, strict=True):
            await asyncio.sleep(max(0.0, first_failure + offset - time.time()))
            with (folder / f"{index}.out").open("a") as out:
                out.write("".join(f"0: {line}\n" for line in TRACEBACK))
            job = scheduler.jobs[str(index)]
            scheduler.jobs[str(index)] = job.model_copy(update={"state": workloads.JobState.FAILED, "exit_code": 1})
        failed = {names[i] for i in failing}
        await _until(lambda: failed <= set(closed), "every failed workload's first generation closed")
        outcomes = [r.payload for r in await store.audit_records(kind=vocab.AuditKind.OUTCOME)]
        breaker = switch.breaker_reason(await store.control(switch.BREAKER))
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=60)
        await store.close()
    acted = {job for _, op, job in scheduler.mutated_at if op in ("requeue", "requeue_hold")}
    details = [str(p.get("detail", "")) for p in outcomes]
    return {
        "run": name,
        "limit": "administrator's max_actions_per_hour" if cap is not None else "policy maxActionsPerHour",
        "maximum": cap if cap is not None else per_hour,
        "failed": len(failed),
        "acted": len(acted),
        "refused": sum(d.startswith("blocked by") for d in details),
        "stopped": sum("not carried out" in d for d in details),
        "breaker_open": breaker is not None,
        "first_action_s": round(min(t for t, _, _ in scheduler.mutated_at) - first_failure, 3)
        if scheduler.mutated_at else None,
        "closed_s": round(max(closed[w] for w in failed) - first_failure, 3),
    }


async def _until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"correlated_failures: timed out waiting for: {what}")
        await asyncio.sleep(0.05)


async def run(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    runs = [await one_run(args, folder / "policy", "policy", per_hour=args.per_hour, cap=None),
            await one_run(args, folder / "cap", "cap", per_hour=10000, cap=args.cap)]
    return {"workloads": args.workloads, "failures": args.failures, "within_s": 1.0, "latency_s": args.latency,
            "db": args.db, "runs": runs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=50)
    parser.add_argument("--failures", type=int, default=20, help="workloads failing within one second (default 20)")
    parser.add_argument("--latency", type=float, default=0.2, help="seconds per mutating scheduler call")
    parser.add_argument("--per-hour", type=int, default=2, help="the policy's maxActionsPerHour (default 2)")
    parser.add_argument("--cap", type=int, default=5, help="the administrator's max_actions_per_hour (default 5)")
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--seed", type=int, default=21)
    args = parser.parse_args(argv)
    if not 0 < args.failures <= args.workloads:
        parser.error("--failures must be between 1 and --workloads")
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    with tempfile.TemporaryDirectory(prefix="tg-correlated-") as tmp:
        try:
            result = asyncio.run(run(args, Path(tmp)))
        except (database.StoreError, OSError) as exc:
            print(f"correlated_failures: {exc}", file=sys.stderr)
            return 2
    print(json.dumps(result, indent=2))
    return 0 if all(r["acted"] <= r["maximum"] for r in result["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
