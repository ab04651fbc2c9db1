"""What a restart of ours picks up for a workload an earlier run tracked.

Place: a step module of the engine, asked by tracking (``tracking.Tracking.track``) on the first
sight of a job the store already knows. Three things come back from the store so that a restart
resumes where it stopped: the policy history and the attempts already advised on (no fresh retry
budgets, no second advice on one attempt), the attempt count for an adapter that keeps it in memory
only, and, for an object deleted and created again under its name, a clean start (the predecessor's
history is retired under another id).
"""

from __future__ import annotations

from collections.abc import Sequence

from trainguard.engine import runtime
from trainguard.model import vocab, workloads
from trainguard.policy import ledger
from trainguard.schedulers import base
from trainguard.store import audit

logger = runtime.logger


class Restore:
    """Reads back a known workload's history from the store."""

    def __init__(self, scheduler: base.Scheduler, store: audit.AuditStore) -> None:
        self.scheduler = scheduler
        self.store = store

    async def retire_incarnation(self, job: workloads.JobSnapshot, at: float) -> bool:
        """Whether ``job`` is a new object under a known id (deleted and created again): then the
        previous one's history is retired (it continues under the retired id) and ``job`` starts
        with none. A job without an incarnation (Slurm) is never a new one."""
        if not job.incarnation:
            return False
        retired = await self.store.retire_incarnation(job.workload, incarnation=job.incarnation, at=at)
        if retired is None:
            return False
        logger.warning("%s is a new object (uid %s): the previous one's history is kept as %s",
                       job.workload, job.incarnation, retired)
        return True

    async def history(self, rt: runtime.WorkloadRuntime, facts: Sequence[audit.AttemptHistory]) -> None:
        """A workload an earlier run of ours tracked: its policy history and which of its attempts
        were already advised on (``facts``, read from the store for many workloads at once), so that a
        restart resumes where it stopped instead of granting fresh retry budgets or advising an attempt
        twice."""
        if not facts:
            return
        records: list[ledger.AttemptRecord] = []
        given: list[tuple[int, int, vocab.AdviceAction, list[str]]] = []
        for fact in facts:
            records.append(ledger.AttemptRecord(
                attempt=fact.attempt, started_at=fact.started_at, ended_at=fact.ended_at,
                checkpoint_saved=fact.checkpoint_saved,
                anomaly_category=runtime.stored_enum(vocab.Category, fact.category),
                attribution=runtime.stored_enum(vocab.Attribution, fact.attribution),
            ))
            for generation, action, exclusions in fact.advice:
                known = runtime.stored_enum(vocab.AdviceAction, action)
                if known is not None:
                    given.append((fact.attempt, generation, known, exclusions))
        rt.history = ledger.restored(rt.workload, records, given)
        for record in rt.history.attempts:
            if record.action is not None:
                acted = record.action != vocab.AdviceAction.NONE and record.attribution is not None
                rt.memory.advised[record.attempt] = (record.attribution.value if acted and record.attribution
                                                     else vocab.Attribution.NONE.value)
        logger.info("%s: resumed its history: %d attempt(s), %d advice, excluded %s", rt.workload,
                    len(records), len(given), ", ".join(rt.history.excluded_nodes) or "none")

    async def floor_attempt(
        self, job: workloads.JobSnapshot, history: ledger.WorkloadHistory
    ) -> workloads.JobSnapshot:
        """The job as its adapter sees it once told the highest attempt we recorded, for an adapter
        that counts some restarts in memory only (``schedulers.base.AttemptFloor``); otherwise ``job``.
        A scheduler error leaves ``job`` as it was (tracked all the same, and logged)."""
        recorded = max((record.attempt for record in history.attempts), default=0)
        if job.attempt >= recorded or not isinstance(self.scheduler, base.AttemptFloor):
            return job
        try:
            await self.scheduler.floor_attempt(job.job_id, recorded)
            return await self.scheduler.get_job(job.job_id)
        except base.SchedulerError as exc:
            logger.warning("%s: attempt %d recorded, the scheduler reports %d and could not be told: %s",
                           job.workload, recorded, job.attempt, exc)
            return job
