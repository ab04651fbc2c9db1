"""The executor: observe, compare, act, verify, report, once per advice generation.

Place in the loop: after ``policy`` (which produces an Advice) and the audit store;
before ``watchdog`` (which takes over when a generation fails or runs out of time).

Order of writes, so that a crash at any point is resumed and never repeated:
1. ``reconcile`` writes the advice row itself first (idempotent: a caller that already
   wrote it loses nothing); the audit record exists before the scheduler is touched.
2. It re-reads the job (observe). If the desired state already holds it records an
   outcome "already satisfied" (Converged) and stops.
3. For each named step (``steps.plan``) it re-reads the job, skips a step whose effect is
   already visible, otherwise commits an action INTENT row keyed by (workload, attempt,
   generation, step), calls the scheduler, and commits the result.
4. It verifies with a fresh read and records the outcome (Converged), or hands the
   generation to the watchdog (Abandoned), which releases any hold we placed.

A restarted process that finds an intent without a result re-reads the scheduler and
decides from its state whether the step took effect (e.g. the restart count advanced =>
the requeue happened => it is marked done, not repeated). In Monitor mode the steps are
recorded as ``skipped: monitor mode`` and no mutating scheduler method is called.

Blast-radius limits are evaluated in both modes before the first step (``blast_limit``) and
their figures recorded on the outcome (``blast_radius`` in its audit payload). In Action mode a
limit that blocks closes the generation as Abandoned with every step ``skipped: blocked``; in
Monitor mode the steps are recorded as ``skipped: monitor mode; would be blocked: ...`` so the
Monitor trail shows what Action mode would have refused (and the engine counts only the
generations that would have run in a Monitor policy's actions-per-hour window).

A hold step records how the scheduler shows the hold right after it (``watchdog.HOLD_SEEN``);
the ``release`` step (e.g. after a retry backoff) releases only a hold that still looks so, and
leaves a person's hold alone (see ``watchdog``).

Fencing (several replicas, one acting): every scheduler mutation first asks the ``ports.Fence``
for the current leadership token and commits (or re-reads, when resuming) its intent row with that
token; the store refuses the intent in the same transaction when a newer leader has claimed. A
refused or locally lost token (``actions.FencedError``) stops this generation where it is, without
calling the scheduler and without closing it: the new leader resumes it from the action rows.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from trainguard.act import ports, steps, watchdog
from trainguard.model import actions, advice, clock, limits, vocab, workloads

logger = logging.getLogger(__name__)

BlastLimit = Callable[[advice.Advice], Awaitable[limits.LimitReport]]
"""Evaluates every blast-radius limit against this advice now; ``report.reason`` is None to allow."""

MONITOR_SKIP = "skipped: monitor mode"
WOULD_BLOCK = "would be blocked"
ALREADY_IN_EFFECT = "already in effect"


class Executor:
    """Carries out advice generations against one scheduler, recording every step."""

    def __init__(
        self, scheduler: ports.JobScheduler, ledger: ports.Ledger, clock_: clock.Clock, *,
        blast_limit: BlastLimit | None = None, fence: ports.Fence = ports.ALWAYS_LEADER,
    ) -> None:
        self._scheduler = scheduler
        self._ledger = ledger
        self._clock = clock_
        self._blast_limit = blast_limit
        self._fence = fence
        self.watchdog = watchdog.Watchdog(scheduler, ledger, clock_, fence=fence)

    async def reconcile(self, item: advice.Advice) -> vocab.Disposition:
        """Bring the scheduler to ``item``'s desired state (or record what would be done)."""
        await self._ledger.record_advice(item, at=self._clock.now())
        closed = await self._ledger.get_outcome(item.workload, item.attempt, item.generation)
        if closed is not None:
            return closed.disposition
        try:
            job_id = await self._ledger.job_id_of(item.workload)
            if job_id is None:
                return await self.watchdog.abandon(item, f"no scheduler job id recorded for workload {item.workload}")
            try:
                return await self._reconcile(item, job_id)
            except actions.FencedError:
                raise
            except Exception as exc:  # scheduler errors and anything unexpected: fall back, never leave it held
                logger.exception("executor failed on %s generation %d", item.workload, item.generation)
                return await self.watchdog.abandon(item, f"executor error: {type(exc).__name__}: {exc}")
        except actions.FencedError as exc:
            return await self._fenced(item, exc)

    async def _fenced(self, item: advice.Advice, exc: actions.FencedError) -> vocab.Disposition:
        """Leadership is lost: stop here, leave the generation pending for the new leader, say so."""
        logger.warning("%s attempt %d generation %d: not the leader any more, stopping before the scheduler "
                       "is touched (%s); the new leader resumes it", item.workload, item.attempt, item.generation, exc)
        try:
            await self._ledger.record_watchdog(
                workload=item.workload, attempt=item.attempt, generation=item.generation, at=self._clock.now(),
                payload={"reason": f"fenced: {exc}", "fenced": True, "action": item.action.value},
            )
        except Exception:  # the trail note is best effort; the refusal itself already held
            logger.exception("cannot record the fenced stop of %s generation %d", item.workload, item.generation)
        return vocab.Disposition.PENDING

    async def _observe(self, item: advice.Advice, job_id: str) -> steps.Observation:
        job = await self._scheduler.get_job(job_id)
        if not item.drain_nodes:
            return steps.Observation(job)
        return steps.Observation(job, {n.name: n for n in await self._scheduler.list_nodes()})

    async def _close(self, item: advice.Advice, disposition: vocab.Disposition, detail: str,
                     report: limits.LimitReport | None = None) -> vocab.Disposition:
        outcome = await self._ledger.record_outcome(actions.OutcomeRecord(
            workload=item.workload, attempt=item.attempt, generation=item.generation, disposition=disposition,
            detail=detail, decided_by=item.decided_by, at=self._clock.now(),
            limits=report.payload() if report is not None and report.checks else None,
        ))
        return outcome.disposition

    async def _monitor_limits(self, item: advice.Advice) -> limits.LimitReport | None:
        """What the limits would say in Action mode; a failure to evaluate them never stops the record."""
        if self._blast_limit is None:
            return None
        try:
            return await self._blast_limit(item)
        except Exception as exc:
            logger.warning("%s generation %d: blast-radius limits not evaluated in Monitor mode: %s",
                           item.workload, item.generation, exc)
            return None

    def _row(self, item: advice.Advice, step: steps.Step, status: actions.ActionStatus,
             error: str = "") -> actions.ActionRecord:
        return actions.ActionRecord(
            workload=item.workload, attempt=item.attempt, generation=item.generation, step=step.name,
            operation=step.operation, args=step.args, status=status, error=error, decided_by=item.decided_by,
        )

    async def _finish(self, item: advice.Advice, step: steps.Step, status: actions.ActionStatus,
                      error: str = "", result: dict[str, Any] | None = None) -> None:
        await self._ledger.finish_action(workload=item.workload, attempt=item.attempt, generation=item.generation,
                                         step=step.name, status=status, at=self._clock.now(), error=error,
                                         result=result)

    def _expired(self, item: advice.Advice) -> bool:
        return item.deadline is not None and self._clock.now() >= item.deadline

    async def _reconcile(self, item: advice.Advice, job_id: str) -> vocab.Disposition:
        if self._expired(item):
            return await self.watchdog.abandon(item, "deadline passed before the executor started")
        plan = steps.plan(item, job_id)
        rows = {r.step: r for r in await self._ledger.actions_for(item.workload, item.attempt, item.generation)}
        seen = await self._observe(item, job_id)
        if not rows and not steps.unmet(item, seen):
            return await self._close(item, vocab.Disposition.CONVERGED, "already satisfied")
        if item.mode is vocab.Mode.MONITOR:
            report = await self._monitor_limits(item)
            blocked = report.reason if report is not None else None
            skip = f"{MONITOR_SKIP}; {WOULD_BLOCK}: {blocked}" if blocked else MONITOR_SKIP
            for step in plan:
                await self._ledger.begin_action(self._row(item, step, actions.ActionStatus.SKIPPED, skip),
                                                at=self._clock.now())
            detail = f"monitor mode: would run {', '.join(s.name for s in plan) or 'nothing'}"
            if blocked:
                detail = f"monitor mode: Action mode would be blocked by a blast-radius limit: {blocked}"
            return await self._close(item, vocab.Disposition.MONITORED, detail, report)
        report = None
        if not rows and self._blast_limit is not None:
            report = await self._blast_limit(item)
            if report.reason:
                for step in plan:
                    await self._ledger.begin_action(
                        self._row(item, step, actions.ActionStatus.SKIPPED, f"blocked: {report.reason}"),
                        at=self._clock.now())
                return await self._close(item, vocab.Disposition.ABANDONED,
                                         f"blocked by blast-radius limit: {report.reason}", report)
        for step in plan:
            if self._backing_off(item, step, rows.get(step.name)):
                # Requeued and held; the release waits for the retry backoff. The advice stays
                # pending: the engine calls reconcile again once ``release_at`` has passed (and
                # the watchdog's deadline, set past it, still guards the hold).
                return vocab.Disposition.PENDING
            failure = await self._run_step(item, step, rows.get(step.name))
            if failure:
                return await self.watchdog.abandon(item, failure)
        seen = await self._observe(item, job_id)
        missing = steps.unmet(item, seen)
        if missing:
            return await self.watchdog.abandon(item, f"verify failed: {'; '.join(missing)}")
        return await self._close(item, vocab.Disposition.CONVERGED, f"verified after {len(plan)} step(s)", report)

    def _backing_off(self, item: advice.Advice, step: steps.Step, row: actions.ActionRecord | None) -> bool:
        return (
            step.operation is actions.Operation.RELEASE
            and item.release_at is not None
            and self._clock.now() < item.release_at
            and (row is None or row.status is actions.ActionStatus.INTENT)
        )

    async def _run_step(self, item: advice.Advice, step: steps.Step, row: actions.ActionRecord | None) -> str:
        """Run one step unless done or in effect; returns a failure reason, or "" on success."""
        if row is not None and row.status in (actions.ActionStatus.DONE, actions.ActionStatus.SKIPPED):
            return ""
        if row is not None and row.status is actions.ActionStatus.FAILED:
            return f"step {step.name} failed earlier: {row.error}"
        if self._expired(item):
            return f"deadline passed before step {step.name}"
        seen = await self._observe(item, step.job_id)
        if step.in_effect(seen):
            if row is None:
                await self._ledger.begin_action(self._row(item, step, actions.ActionStatus.SKIPPED, ALREADY_IN_EFFECT),
                                                at=self._clock.now())
            else:  # an intent from before a restart whose call did take effect
                await self._finish(item, step, actions.ActionStatus.DONE, "took effect before a restart",
                                   result=_hold_seen(step, seen.job))
            return ""
        if step.operation is actions.Operation.RELEASE:
            foreign = watchdog.hold_not_ours(
                await self._ledger.actions_for(item.workload, item.attempt, item.generation), seen.job)
            if foreign:  # a person held the job after us: their hold is theirs to release
                left = watchdog.left_alone_row(item, step.name, seen.job, foreign, decided_by=item.decided_by)
                if row is None:
                    await self._ledger.begin_action(left, at=self._clock.now())
                else:
                    await self._finish(item, step, actions.ActionStatus.SKIPPED, left.error)
                return left.error
        # Fenced: the intent is committed (or, resuming, re-read) with the current leadership token in
        # one transaction, and the token is checked once more right before the call.
        intent = self._row(item, step, actions.ActionStatus.INTENT)
        if row is None:
            intent = _with_added_nodes(intent, step, seen)
        await self._ledger.begin_action(intent, at=self._clock.now(), fence=self._fence.token(item.workload))
        self._fence.token(item.workload)
        try:
            await step.run(self._scheduler)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            await self._finish(item, step, actions.ActionStatus.FAILED, error)
            return f"step {step.name} failed: {error}"
        await self._finish(item, step, actions.ActionStatus.DONE, result=await self._read_hold(step))
        return ""

    async def _read_hold(self, step: steps.Step) -> dict[str, Any] | None:
        """After a hold step: how the scheduler shows the hold we just placed (None if not readable)."""
        if not step.operation.places_hold:
            return None
        try:
            job = await self._scheduler.get_job(step.job_id)
        except Exception as exc:  # the hold stands; only its later verification is lost
            logger.warning("cannot read the hold just placed on %s: %s", step.job_id, exc)
            return None
        return _hold_seen(step, job)


def _hold_seen(step: steps.Step, job: workloads.JobSnapshot) -> dict[str, Any] | None:
    """The ``hold_seen`` argument for a hold step's row, when the job shows a hold."""
    if not step.operation.places_hold or not job.held:
        return None
    return {watchdog.HOLD_SEEN: watchdog.hold_fingerprint(job)}


def _with_added_nodes(record: actions.ActionRecord, step: steps.Step, seen: steps.Observation) -> actions.ActionRecord:
    """An ``exclude_nodes`` intent also records which of its nodes the job did not exclude yet.

    The step writes the whole desired list (the user's own ``--exclude`` stays in it), but only
    the nodes it adds are Trainguard's: the store counts those, and only those, against
    ``maxExcludedNodesPerJob`` (``AuditStore.own_exclusions``).
    """
    if step.operation is not actions.Operation.EXCLUDE_NODES:
        return record
    added = [node for node in step.nodes if node not in seen.job.excluded_nodes]
    return record.model_copy(update={"args": {**record.args, "added_nodes": added}})
