"""Somebody else's decisions about a workload's attempts: recorded once each, never acted on.

Place: a step module of the engine, asked by tracking when discovery sees an attempt end or be
replaced (so the console and the Events say who ended it) and by the decision before it decides
(``act.whose`` judges a person's cancel, requeue or hold and the scheduler's time limit from a
fresh read of the job and our own action rows).
"""

from __future__ import annotations

from trainguard.act import whose
from trainguard.engine import runtime
from trainguard.model import clock, vocab, workloads
from trainguard.schedulers import base
from trainguard.store import audit

logger = runtime.logger

ALREADY_RECORDED = whose.Change(whose.PERSON, "recorded", "somebody else's decision, already recorded")
"""What ``Theirs.note_ending`` answers for an attempt whose change is on record already."""


class Theirs:
    """Records the decisions that are not ours (``act.whose``), once per attempt."""

    def __init__(self, scheduler: base.Scheduler, store: audit.AuditStore, clock_: clock.Clock,
                 reporter: runtime.Reporter) -> None:
        self.scheduler = scheduler
        self.store = store
        self.clock = clock_
        self.reporter = reporter

    async def record(self, rt: runtime.WorkloadRuntime, job: workloads.JobSnapshot, attempt: int,
                     change: whose.Change) -> None:
        """Record somebody else's decision about ``attempt`` once (``act.whose``); never acted on."""
        if attempt in rt.memory.not_ours:
            return
        rt.memory.not_ours.add(attempt)
        payload = change.payload(job)
        await self.store.record_not_ours(workload=rt.workload, attempt=attempt, payload=payload, at=self.clock.now())
        await self.reporter.notify(rt, vocab.AuditKind.ACTION, payload)
        logger.info("%s attempt %d: %s; recorded, not acted on", rt.workload, attempt, change)

    async def record_unwatched(self, rt: runtime.WorkloadRuntime, job: workloads.JobSnapshot) -> None:
        """An attempt that had ended before we watched it (``Tracking.unwatched``): the scheduler's, recorded."""
        change = whose.Change(whose.SCHEDULER, "ended-unwatched",
                              f"attempt {job.attempt} had already ended ({job.state.value}) before Trainguard "
                              "watched it: recorded, not judged or acted on")
        await self.record(rt, job, job.attempt, change)

    async def note_ending(self, rt: runtime.WorkloadRuntime, job: workloads.JobSnapshot,
                          attempt: int) -> whose.Change | None:
        """Record, once, when ``attempt`` was ended or replaced by somebody else's decision (``act.whose``),
        judged from ``job`` and our own action rows; returns that decision (None: the workload's failure
        stands). Discovery calls it on every ending, whether or not the output shows anything, so the
        console and the Events say who ended it; the decision asks it too (``check``)."""
        if attempt in rt.memory.not_ours:
            return ALREADY_RECORDED
        change = whose.ending(job, attempt, await self.store.actions_of(rt.workload))
        if change is not None:
            await self.record(rt, job, attempt, change)
        return change

    async def check(
        self, rt: runtime.WorkloadRuntime, attempt: int
    ) -> tuple[whose.Change | None, workloads.JobSnapshot]:
        """``note_ending`` on a fresh read of the job, and that read (no read once recorded)."""
        if attempt in rt.memory.not_ours:
            return ALREADY_RECORDED, rt.job
        job = await self.fresh_job(rt)
        return await self.note_ending(rt, job, attempt), job

    async def fresh_job(self, rt: runtime.WorkloadRuntime) -> workloads.JobSnapshot:
        """A fresh read of the job for a decision (``rt.job`` when the scheduler cannot answer). It does
        not replace ``rt.job``: that is discovery's view, and tracking tells the job's transitions
        (its end, a new attempt) from it; a read here must not hide them."""
        try:
            return await self.scheduler.get_job(rt.job.job_id)
        except base.SchedulerError as exc:
            logger.warning("cannot re-read job %s before deciding: %s", rt.job.job_id, exc)
        return rt.job
