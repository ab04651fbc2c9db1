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

A Kubernetes restart is a suspend then a resume, planned as ``requeue_hold`` -> ``release``
(``steps.suspend_cycle``), so the rules above cover it: a workload we suspended is resumed when its
generation is abandoned, runs past its deadline, or closed while we were down. Rows of an older
version planned it as one ``requeue`` step, which is no hold row; such a generation (not converged,
no settled release) is released too when the scheduler itself shows the hold as ours (its
``hold_detail`` starts with ``OUR_HOLD_PREFIX``: our ``trainguard.dev/suspended-by`` annotation). A
suspend without our annotation is a person's and is never resumed.

A person's hold is theirs. Slurm keeps one hold per job (priority 0) with one reason, so a
person who holds a job that we hold, or releases ours and holds it again, leaves no other
trace; our rows alone cannot tell. Right after placing a hold the executor records how the
scheduler shows it (``hold_seen`` in the hold row's arguments: reason code and description,
e.g. ``JobHeldUser`` / ``job requeued in held state``). Every release of ours (the watchdog's,
on start-up, and the executor's ``release`` step after a retry backoff) first re-reads the job
and releases only if the hold is still shown exactly so; otherwise it leaves the hold alone,
closes our claim with a skipped release row (so it is never reconsidered) and records that in
a ``watchdog`` audit record. A hold recorded without ``hold_seen`` (rows of an older version,
or a read that failed right after the hold) cannot be verified and is released as before:
never leaving a job held by us weighs more there. Known blind spot: a person's user hold
(``scontrol uhold``) placed on top of our requeue-hold without a release changes nothing Slurm
shows, so it is indistinguishable from ours.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

from trainguard.act import ports, steps
from trainguard.model import actions, advice, clock, vocab, workloads

logger = logging.getLogger(__name__)

RELEASE_STEP = "watchdog_release"
"""Action row key of the watchdog's own release for one advice generation."""

LEAVE_STEP = "watchdog_leave_hold"
"""Action row key (a skipped release) recording that the watchdog left a person's hold alone."""
HOLD_SEEN = actions.HOLD_SEEN
LEFT_ALONE = "left alone: a person holds the job"
"""Error text (prefix) of a release row we did not carry out because the hold is no longer ours."""

OUR_HOLD_PREFIX = "trainguard:"
"""How an adapter describes a hold it placed for us (``schedulers.base.OUR_REASON_PREFIX``, which ``act`` may
not import): a Kubernetes suspend of ours shows its ``trainguard.dev/suspended-by`` value as ``hold_detail``."""

_HOLDING = (actions.Operation.HOLD, actions.Operation.REQUEUE_HOLD)
_EFFECTIVE = (actions.ActionStatus.INTENT, actions.ActionStatus.DONE)
_SETTLED = (actions.ActionStatus.DONE, actions.ActionStatus.SKIPPED)


def holds_unreleased(rows: list[actions.ActionRecord]) -> bool:
    """True when the rows show a hold we placed (or may have placed) and no settled release.

    A release row is settled when done, or skipped: the job was not held any more when we
    looked, or the hold was a person's and we left it alone.
    """
    placed = any(r.operation in _HOLDING and r.status in _EFFECTIVE for r in rows)
    released = any(r.operation is actions.Operation.RELEASE and r.status in _SETTLED for r in rows)
    return placed and not released


def suspend_left(rows: list[actions.ActionRecord]) -> bool:
    """True when the rows show a one-step ``requeue`` of a workload whose restart is a suspend cycle
    (rows of a version that planned it so) and no settled release: its suspend may still stand."""
    requeued = any(r.operation is actions.Operation.REQUEUE and r.status in _EFFECTIVE
                   and steps.suspend_cycle(str(r.args.get("job_id", ""))) for r in rows)
    released = any(r.operation is actions.Operation.RELEASE and r.status in _SETTLED for r in rows)
    return requeued and not released


def hold_fingerprint(job: workloads.JobSnapshot) -> dict[str, str]:
    """How the scheduler shows the job's hold (recorded as ``hold_seen``, compared before a release)."""
    return {"reason": job.hold_reason, "detail": job.hold_detail}


def _describe(seen: Any) -> str:
    if not isinstance(seen, dict):
        return "unknown"
    reason, detail = str(seen.get("reason") or "reason unknown"), str(seen.get("detail") or "")
    return f"{reason} ({detail})" if detail else reason


def hold_not_ours(rows: list[actions.ActionRecord], job: workloads.JobSnapshot) -> str:
    """Why the hold ``job`` shows now is not the one we placed; "" when it still is (or cannot be told).

    Compares the fresh read with ``hold_seen`` of our latest hold row of the same generation.
    """
    placed = [r for r in rows if r.operation in _HOLDING and r.status in _EFFECTIVE]
    if not placed or not job.held:
        return ""
    then = placed[-1].args.get(HOLD_SEEN)
    if not isinstance(then, dict):
        return ""
    now = hold_fingerprint(job)
    if {"reason": str(then.get("reason") or ""), "detail": str(then.get("detail") or "")} == now:
        return ""
    return f"the job is held as {_describe(now)}, not as we left it ({_describe(then)})"


def left_alone(rows: list[actions.ActionRecord]) -> actions.ActionRecord | None:
    """The release row that records a person's hold we left alone, if any."""
    return next((r for r in rows if r.operation is actions.Operation.RELEASE
                 and r.status is actions.ActionStatus.SKIPPED and r.error.startswith(LEFT_ALONE)), None)


class HoldRelease(NamedTuple):
    """What ``release_our_hold`` did: released, failed (``error``), or left a person's hold (``left``)."""

    released: bool
    error: str = ""
    left: str = ""


class Watchdog:
    """Deadline enforcement and hold release for one scheduler and one audit store."""

    def __init__(self, scheduler: ports.JobScheduler, ledger: ports.Ledger, clock_: clock.Clock, *,
                 fence: ports.Fence = ports.ALWAYS_LEADER) -> None:
        self._scheduler = scheduler
        self._ledger = ledger
        self._clock = clock_
        self._fence = fence

    def _covers(self, workload: str) -> bool:
        """Whether this instance may act on ``workload`` now. With shards (``shards.py``) other replicas own
        the others' generations: skipped quietly here, not stopped at as a lost leadership."""
        try:
            self._fence.token(workload)
        except actions.FencedError:
            return False
        return True

    async def abandon(self, item: advice.Advice, reason: str) -> vocab.Disposition:
        """Release our hold (if any), record the watchdog intervention, close the generation.

        Raises ``actions.FencedError`` (closing nothing) when this instance is no longer the leader."""
        self._fence.token(item.workload)
        released, release_error, _ = await self.release_our_hold(item)
        payload: dict[str, object] = {"reason": reason, "released_hold": released, "action": item.action.value}
        if release_error:
            payload["release_error"] = release_error
        left = left_alone(await self._ledger.actions_for(item.workload, item.attempt, item.generation))
        if left is not None:  # by us now, or by the executor's release step just before
            payload.update(_left_payload(left))
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

    async def release_our_hold(self, item: advice.Advice) -> HoldRelease:
        """Release the job if our rows for this generation show an unreleased hold of ours and a
        fresh read shows the hold is still the one we placed.

        The release is itself an action row (``watchdog_release``) so a crash during it is
        resumed like any other step; a hold that is a person's gets that row as ``skipped``.
        """
        rows = await self._ledger.actions_for(item.workload, item.attempt, item.generation)
        held_by_rows = holds_unreleased(rows)
        if not held_by_rows and not suspend_left(rows):
            return HoldRelease(False)
        job_id = await self._ledger.job_id_of(item.workload)
        if job_id is None:
            return HoldRelease(False, f"no job id recorded for {item.workload}")
        try:
            job = await self._scheduler.get_job(job_id)
            if not job.held or not (held_by_rows or job.hold_detail.startswith(OUR_HOLD_PREFIX)):
                return HoldRelease(False)
            foreign = hold_not_ours(rows, job)
            if foreign:
                await self._ledger.begin_action(
                    left_alone_row(item, LEAVE_STEP, job, foreign, decided_by=vocab.Decider.WATCHDOG),
                    at=self._clock.now())
                logger.warning("%s generation %d: %s; not released", item.workload, item.generation, foreign)
                return HoldRelease(False, left=foreign)
            await self._ledger.begin_action(actions.ActionRecord(
                workload=item.workload, attempt=item.attempt, generation=item.generation, step=RELEASE_STEP,
                operation=actions.Operation.RELEASE, args={"job_id": job_id}, decided_by=vocab.Decider.WATCHDOG,
            ), at=self._clock.now(), fence=self._fence.token(item.workload))
            self._fence.token(item.workload)
            await self._scheduler.release(job_id)
        except actions.FencedError:
            raise
        except Exception as exc:  # any scheduler failure: record it, the next recover() retries
            error = f"{type(exc).__name__}: {exc}"
            if any(r.step == RELEASE_STEP for r in await self._ledger.actions_for(
                    item.workload, item.attempt, item.generation)):
                await self._finish(item, actions.ActionStatus.FAILED, error)
            return HoldRelease(False, error)
        await self._finish(item, actions.ActionStatus.DONE, "")
        return HoldRelease(True)

    async def _finish(self, item: advice.Advice, status: actions.ActionStatus, error: str) -> None:
        await self._ledger.finish_action(workload=item.workload, attempt=item.attempt, generation=item.generation,
                                         step=RELEASE_STEP, status=status, at=self._clock.now(), error=error)

    async def sweep(self) -> list[advice.Advice]:
        """Abandon pending generations whose deadline has passed; returns them."""
        now = self._clock.now()
        expired = [a for a in await self._ledger.pending_advice()
                   if a.deadline is not None and now >= a.deadline and self._covers(a.workload)]
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
        rows = await self._ledger.actions_by_operation([*_HOLDING, actions.Operation.REQUEUE])
        holding = {(r.workload, r.attempt, r.generation) for r in rows if r.operation in _HOLDING}
        suspending = {(r.workload, r.attempt, r.generation) for r in rows if r.operation is actions.Operation.REQUEUE
                      and steps.suspend_cycle(str(r.args.get("job_id", "")))}
        keys = sorted(k for k in holding | suspending if self._covers(k[0]))
        released: list[advice.Advice] = []
        for workload, attempt, generation in keys:
            item = await self._ledger.get_advice(workload, attempt, generation)
            outcome = await self._ledger.get_outcome(workload, attempt, generation)
            if item is None or outcome is None:
                continue  # still pending within its deadline: the executor resumes it
            if item.action is vocab.AdviceAction.HOLD and outcome.disposition is vocab.Disposition.CONVERGED:
                continue  # the hold is the desired state
            if (workload, attempt, generation) not in holding and outcome.disposition is vocab.Disposition.CONVERGED:
                continue  # a one-step requeue verified not held: any suspend since is not this generation's
            try:
                done, error, foreign = await self.release_our_hold(item)
            except actions.FencedError as exc:
                logger.warning("watchdog recover stopped: not the leader any more (%s)", exc)
                break
            if done or error:
                await self._ledger.record_watchdog(
                    workload=workload, attempt=attempt, generation=generation, at=self._clock.now(),
                    payload={"reason": "hold of ours left after the generation closed", "released_hold": done,
                             **({"release_error": error} if error else {})},
                )
            elif foreign:
                left = left_alone(await self._ledger.actions_for(workload, attempt, generation))
                await self._ledger.record_watchdog(
                    workload=workload, attempt=attempt, generation=generation, at=self._clock.now(),
                    payload={"reason": "hold of ours left after the generation closed", "released_hold": False,
                             **(_left_payload(left) if left is not None else {"left_human_hold": foreign})},
                )
            if done:
                released.append(item)
        return released


def left_alone_row(item: advice.Advice, step: str, job: workloads.JobSnapshot, why: str, *,
                   decided_by: vocab.Decider) -> actions.ActionRecord:
    """The skipped release row that records a person's hold we did not release (and never will)."""
    return actions.ActionRecord(
        workload=item.workload, attempt=item.attempt, generation=item.generation, step=step,
        operation=actions.Operation.RELEASE, args={"job_id": job.job_id, HOLD_SEEN: hold_fingerprint(job)},
        status=actions.ActionStatus.SKIPPED, error=f"{LEFT_ALONE}: {why}", decided_by=decided_by,
    )


def _left_payload(row: actions.ActionRecord) -> dict[str, object]:
    """The watchdog audit fields that say we left a person's hold alone, and how the hold looked."""
    return {"left_human_hold": row.error.removeprefix(f"{LEFT_ALONE}: "), "hold": row.args.get(HOLD_SEEN, {}),
            "released_hold": False}
