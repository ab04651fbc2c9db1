"""The engine tests' scenario kit: a Harness that drives one Engine by hand, and the job output lines.

The engine runs with a real SQLite audit store in tmp_path, the real pattern catalog and matcher,
a ``ManualClock`` and the in-memory ``FakeScheduler`` (our Scheduler Protocol, not Slurm). Each
job's output file is a real file in tmp_path that the test appends to as the job "prints".
Tests drive the engine's timers by hand (``Harness.step``: one discovery and one tailing round)
instead of ``Engine.run``, so nothing sleeps and every run is deterministic.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support import fake_scheduler
from trainguard import engine as engine_mod
from trainguard import settings as settings_mod
from trainguard.model import clock, vocab, workloads
from trainguard.store import audit

START = 1_800_000_000.0
NODES = ["node1", "node2", "node3", "node4", "node5", "node6"]
SETTLE_S = 1.0

POLICIES = """
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: default}
spec:
  mode: Monitor
  detection: {settle: 1s, hangTimeout: 60s}
---
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: act}
spec:
  mode: Action
  retries: {maxRetries: 3, maxAttemptsWithoutCheckpoint: 10, backoff: {initialSeconds: 0}}
  detection: {settle: 1s, hangTimeout: 60s}
---
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: backoff}
spec:
  mode: Action
  retries: {maxRetries: 5, maxAttemptsWithoutCheckpoint: 10, backoff: {initialSeconds: 30, factor: 2}}
  detection: {settle: 1s, hangTimeout: 60s}
"""
"""Three policies: ``default`` (Monitor), ``act`` (Action, a generous no-checkpoint budget and
immediate retries, so tests of other rules are not cut short by them) and ``backoff`` (Action with
the retry backoff)."""

XID_79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python, GPU has fallen off the bus."
"""A kernel Xid line as the training process's output shows it (a hardware fault)."""

TRACEBACK = (
    "Traceback (most recent call last):",
    '  File "train.py", line 10, in <module>',
    "    main()",
    "ValueError: shapes (4,) and (5,) not aligned",
)
"""An uncaught Python exception in user code (an application failure)."""


def ranked(rank: int, *lines: str) -> list[str]:
    """``lines`` as ``srun --label`` prints them for task ``rank``."""
    return [f"{rank}: {line}" for line in lines]


def workload_of(job_id: str) -> str:
    return f"slurm/test/{job_id}"


@dataclass
class Harness:
    """One engine with its scheduler, store, clock and the jobs' output files."""

    tmp_path: Path
    clock: clock.ManualClock
    scheduler: fake_scheduler.FakeScheduler
    store: audit.AuditStore
    engine: engine_mod.Engine
    extra_engines: list[engine_mod.Engine] = field(default_factory=list)

    # -- the scheduler's side ------------------------------------------------------------------

    def submit(
        self, job_id: str, comment: str = "trainguard policy=act", *,
        state: workloads.JobState = workloads.JobState.RUNNING, nodes: tuple[str, ...] = ("node1", "node2"),
        **fields: Any,
    ) -> workloads.JobSnapshot:
        """A job the scheduler knows, printing to ``<tmp>/<job_id>.out``."""
        job = workloads.JobSnapshot(
            workload=workload_of(job_id), job_id=job_id, name=f"train-{job_id}", state=state,
            nodes=list(nodes) if state == workloads.JobState.RUNNING else [], comment=comment,
            stdout_path=str(self.output(job_id)), **fields,
        )
        self.scheduler.jobs[job_id] = job
        return job

    def output(self, job_id: str) -> Path:
        return self.tmp_path / f"{job_id}.out"

    def write(self, job_id: str, *lines: str) -> None:
        """The job prints ``lines`` (appended, as Slurm's ``--open-mode=append`` does across requeues)."""
        with self.output(job_id).open("a", encoding="utf-8") as handle:
            handle.writelines(line + "\n" for line in lines)

    def change(self, job_id: str, **update: Any) -> workloads.JobSnapshot:
        """The scheduler moves the job on its own (it fails, ends, ...)."""
        job = self.scheduler.jobs[job_id].model_copy(update=update)
        self.scheduler.jobs[job_id] = job
        return job

    def fail(self, job_id: str, exit_code: int = 1) -> workloads.JobSnapshot:
        return self.change(job_id, state=workloads.JobState.FAILED, exit_code=exit_code)

    def mutations(self, job_id: str | None = None) -> list[str]:
        return [m["operation"] for m in self.scheduler.mutations if job_id is None or m["target"] == job_id]

    # -- the engine's timers, by hand ------------------------------------------------------------

    async def step(self, seconds: float = 0.0) -> None:
        """Move the clock, then one discovery round and one tailing round."""
        self.clock.advance(seconds)
        await self.engine.discover()
        await self.engine.tail()

    async def settle(self) -> None:
        """Let an open crash settle window pass, then tail (the detector concludes) and finish recoveries."""
        await self.step(SETTLE_S + 0.5)
        await self.recoveries()

    async def recoveries(self) -> None:
        """Wait for every recovery task the engine spawned."""
        for rt in list(self.engine.runtimes.values()):
            if rt.task is not None:
                await rt.task

    def runtime(self, job_id: str) -> engine_mod.WorkloadRuntime:
        return self.engine.runtimes[workload_of(job_id)]

    # -- the audit log -----------------------------------------------------------------------------

    async def records(self, job_id: str, kind: vocab.AuditKind | None = None) -> list[audit.AuditRecord]:
        return await self.store.audit_records(workload=workload_of(job_id), kind=kind)

    async def kinds(self, job_id: str) -> list[str]:
        return [r.kind.value for r in await self.records(job_id)]

    async def advice(self, job_id: str) -> list[dict[str, Any]]:
        return [r.payload for r in await self.records(job_id, vocab.AuditKind.ADVICE)]

    async def outcomes(self, job_id: str) -> list[dict[str, Any]]:
        return [r.payload for r in await self.records(job_id, vocab.AuditKind.OUTCOME)]

    def new_engine(self, settings: settings_mod.EngineSettings | None = None) -> engine_mod.Engine:
        """A second engine on the same scheduler and store, as after a restart of the process."""
        fresh = engine_mod.Engine(
            self.scheduler, self.store, self.engine.policies, self.engine.catalog, clock_=self.clock,
            settings=settings or self.engine.settings,
        )
        self.extra_engines.append(fresh)
        return fresh


MakeHarness = Callable[..., Awaitable[Harness]]


def open_fds(path: Path) -> int:
    """How many of this process's file descriptors are open on ``path`` (Linux /proc)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                count += 1
        except OSError:
            continue
    return count


