"""The watchdog: a recovery that takes too long or fails goes back to the scheduler's defaults.

Place in the loop: after ``executor``. Every advice carries a deadline; when it passes
before the generation converged, or the executor hit an error, the watchdog releases any
hold *we* placed (known from our own action rows: a ``hold`` or ``requeue_hold`` for the
key with no completed release), writes a ``watchdog`` audit record and closes the
generation as Abandoned. A job is never left held by us: ``recover`` runs on engine start
and releases holds whose generation is closed (or past its deadline) without a release.

Fenced like the executor (``ports.Fence``): a replica that is no longer the leader neither
releases nor closes anything (``actions.FencedError`` propagates); the new leader's ``recover``
does it.

Deliberate exception: a generation whose advice *is* a hold and that converged keeps its
hold (that is the desired state; an operator or a later advice releases it).
"""

from __future__ import annotations

import logging

from trainguard.act import ports
from trainguard.model import actions, advice, clock, vocab

logger = logging.getLogger(__name__)

RELEASE_STEP = "watchdog_release"
"""Action row key of the watchdog's own release for one advice generation."""

_HOLDING = (actions.Operation.HOLD, actions.Operation.REQUEUE_HOLD)
_EFFECTIVE = (actions.ActionStatus.INTENT, actions.ActionStatus.DONE)


def holds_unreleased(rows: list[actions.ActionRecord]) -> bool:
    """True when the rows show a hold we placed (or may have placed) and no completed release."""
    placed = any(r.operation in _HOLDING and r.status in _EFFECTIVE for r in rows)
    released = any(r.operation is actions.Operation.RELEASE and r.status is actions.ActionStatus.DONE for r in rows)
    return placed and not released


class Watchdog:
    """Deadline enforcement and hold release for one scheduler and one audit store."""

    def __init__(self, scheduler: ports.JobScheduler, ledger: ports.Ledger, clock_: clock.Clock, *,
                 fence: ports.Fence = ports.ALWAYS_LEADER) -> None:
        self._scheduler = scheduler
        self._ledger = ledger
        self._clock = clock_
        self._fence = fence

    async def abandon(self, item: advice.Advice, reason: str) -> vocab.Disposition:
        """Release our hold (if any), record the watchdog intervention, close the generation.

        Raises ``actions.FencedError`` (closing nothing) when this instance is no longer the leader."""
        self._fence.token()
        released, release_error = await self.release_our_hold(item)
        payload: dict[str, object] = {"reason": reason, "released_hold": released, "action": item.action.value}
        if release_error:
            payload["release_error"] = release_error
        now = self._clock.now()
        await self._ledger.record_watchdog(workload=item.workload, attempt=item.attempt,
                                           generation=item.generation, payload=payload, at=now)
        outcome = await self._ledger.record_outcome(actions.OutcomeRecord(
            workload=item.workload, attempt=item.attempt, generation=item.generation,
            disposition=vocab.Disposition.ABANDONED, detail=reason, decided_by=vocab.Decider.WATCHDOG, at=now,
        ))
        logger.warning("recovery of %s attempt %d generation %d abandoned: %s",
                       item.workload, item.attempt, item.generation, reason)
        return outcome.disposition

    async def release_our_hold(self, item: advice.Advice) -> tuple[bool, str]:
        """Release the job if our rows for this generation show an unreleased hold of ours.

        Returns (released, error). The release is itself an action row (``watchdog_release``)
        so a crash during it is resumed like any other step.
        """
        rows = await self._ledger.actions_for(item.workload, item.attempt, item.generation)
        if not holds_unreleased(rows):
            return False, ""
        job_id = await self._ledger.job_id_of(item.workload)
        if job_id is None:
            return False, f"no job id recorded for {item.workload}"
        try:
            job = await self._scheduler.get_job(job_id)
            if not job.held:
                return False, ""
            await self._ledger.begin_action(actions.ActionRecord(
                workload=item.workload, attempt=item.attempt, generation=item.generation, step=RELEASE_STEP,
                operation=actions.Operation.RELEASE, args={"job_id": job_id}, decided_by=vocab.Decider.WATCHDOG,
            ), at=self._clock.now(), fence=self._fence.token())
            self._fence.token()
            await self._scheduler.release(job_id)
        except actions.FencedError:
            raise
        except Exception as exc:  # any scheduler failure: record it, the next recover() retries
            error = f"{type(exc).__name__}: {exc}"
            if any(r.step == RELEASE_STEP for r in await self._ledger.actions_for(
                    item.workload, item.attempt, item.generation)):
                await self._finish(item, actions.ActionStatus.FAILED, error)
            return False, error
        await self._finish(item, actions.ActionStatus.DONE, "")
        return True, ""

    async def _finish(self, item: advice.Advice, status: actions.ActionStatus, error: str) -> None:
        await self._ledger.finish_action(workload=item.workload, attempt=item.attempt, generation=item.generation,
                                         step=RELEASE_STEP, status=status, at=self._clock.now(), error=error)

    async def sweep(self) -> list[advice.Advice]:
        """Abandon pending generations whose deadline has passed; returns them."""
        now = self._clock.now()
        expired = [a for a in await self._ledger.pending_advice() if a.deadline is not None and now >= a.deadline]
        done: list[advice.Advice] = []
        for item in expired:
            try:
                late = now - (item.deadline or now)
                await self.abandon(item, f"deadline passed ({late:.0f} s ago) before convergence")
            except actions.FencedError as exc:
                logger.warning("watchdog sweep stopped: not the leader any more (%s)", exc)
                break
            done.append(item)
        return done

    async def recover(self) -> list[advice.Advice]:
        """On engine start: time out expired generations, then release any leftover hold of ours.

        Pending generations still within their deadline are left to the executor, which
        resumes them from their action rows (call ``Executor.reconcile`` for each of
        ``pending_advice()`` after this). Returns the generations whose hold was released.
        """
        await self.sweep()
        rows = await self._ledger.actions_by_operation(list(_HOLDING))
        keys = sorted({(r.workload, r.attempt, r.generation) for r in rows})
        released: list[advice.Advice] = []
        for workload, attempt, generation in keys:
            item = await self._ledger.get_advice(workload, attempt, generation)
            outcome = await self._ledger.get_outcome(workload, attempt, generation)
            if item is None or outcome is None:
                continue  # still pending within its deadline: the executor resumes it
            if item.action is vocab.AdviceAction.HOLD and outcome.disposition is vocab.Disposition.CONVERGED:
                continue  # the hold is the desired state
            try:
                done, error = await self.release_our_hold(item)
            except actions.FencedError as exc:
                logger.warning("watchdog recover stopped: not the leader any more (%s)", exc)
                break
            if done or error:
                await self._ledger.record_watchdog(
                    workload=workload, attempt=attempt, generation=generation, at=self._clock.now(),
                    payload={"reason": "hold of ours left after the generation closed", "released_hold": done,
                             **({"release_error": error} if error else {})},
                )
            if done:
                released.append(item)
        return released
