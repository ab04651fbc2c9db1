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
their figures recorded on the outcome (``blast_radius`` in its audit payload). In Action mode the
engine decides and reserves in one serialised, fenced transaction (``store.ledger``), so recoveries
decided together count each other. A limit that blocks closes the generation as Abandoned with every
step ``skipped: blocked``; an administrator's cap that blocks also opens the latched breaker
(``act.switch``). Degrade, don't abandon: when only the drains are refused, they are recorded as
``skipped: refused by a blast-radius limit: ...`` and the rest (the requeue with its exclusions) is
carried out. In Monitor mode the steps are recorded as ``skipped: monitor mode; would be blocked:
...`` (or ``would be refused`` for the drains alone) so the Monitor trail shows what Action mode
would have refused (and the engine counts only the generations that would have run in a Monitor
policy's actions-per-hour window).

A hold step records how the scheduler shows the hold right after it (``watchdog.HOLD_SEEN``);
the ``release`` step (e.g. after a retry backoff) releases only a hold that still looks so, and
leaves a person's hold alone (see ``watchdog``).

Both run-time keys (``act.switch``): before every step of an Action generation, fresh, resumed after a
restart or after a retry backoff, the executor asks the cluster switch and the runtime pause; when
either is off the watchdog closes the generation (our holds released, nothing else changed) and the
audit says why. Whose change (``act.whose``): before every step a fresh read is compared with our
own action rows; a person who cancelled, requeued or held the job, or removed our exclusions, took
the job back, and the generation is closed the same way with the person's change recorded.

Outages: a step interrupted because the audit database or the scheduler cannot be reached (a read
of the job fails too) leaves the generation pending, never abandoned: the engine resumes it when
they answer again (``Engine.sweep``), each step exactly once through its intent row, with the
exclusions it was advised. The watchdog's deadline still bounds how long a hold of ours may last.

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

from trainguard.act import ports, steps, undrain, watchdog, whose
from trainguard.act import switch as switch_mod
from trainguard.model import actions, advice, clock, limits, vocab, workloads

logger = logging.getLogger(__name__)

BlastLimit = Callable[[advice.Advice], Awaitable[limits.LimitReport]]
"""Evaluates every blast-radius limit against this advice now; ``report.reason`` is None to allow."""
Outage = Callable[[BaseException], bool]
"""Whether an error says a dependency cannot be reached (the engine knows its drivers' errors):
``store`` for the audit database, ``scheduler`` for a read of the scheduler that failed."""
SWITCHED_OFF = "not carried out"
"""Prefix of the watchdog reason when a key is off (``act.switch``)."""
PERSONS_CHANGE = "a change that is not ours"
"""Prefix of the watchdog reason when somebody else changed the job meanwhile (``act.whose``)."""

MONITOR_SKIP = "skipped: monitor mode"
WOULD_BLOCK = "would be blocked"
WOULD_REFUSE = "would be refused"
REFUSED = "skipped: refused by a blast-radius limit"
"""Error text (prefix) of a drain step a limit refused while the rest of its advice was carried out."""
ALREADY_IN_EFFECT = "already in effect"


class Executor:
    """Carries out advice generations against one scheduler, recording every step."""

    def __init__(
        self, scheduler: ports.JobScheduler, ledger: ports.Ledger, clock_: clock.Clock, *,
        blast_limit: BlastLimit | None = None, fence: ports.Fence = ports.ALWAYS_LEADER,
        switch: switch_mod.ActionSwitch = switch_mod.ALWAYS_ON, store_outage: Outage | None = None,
        scheduler_outage: Outage | None = None, on_node_change: ports.NodeChanged | None = None,
    ) -> None:
        self._scheduler = scheduler
        self._on_node_change = on_node_change
        """Told of each drain step done (``ports.tell_node_change``: the operator's Events)."""
        self.switch = switch
        """Both run-time keys, read before every Action step (``act.switch``)."""
        self._store_outage = store_outage
        self._scheduler_outage = scheduler_outage
        self.stalled: set[tuple[str, int, int]] = set()
        """Generations left pending by an outage (workload, attempt, generation): the engine resumes them."""
        self._ledger = ledger
        self._clock = clock_
        self._blast_limit = blast_limit
        self._fence = fence
        self.watchdog = watchdog.Watchdog(scheduler, ledger, clock_, fence=fence)

    @property
    def fence(self) -> ports.Fence:
        """Leadership as this executor fences its mutations with: the limit decision is fenced the same way."""
        return self._fence

    async def reconcile(self, item: advice.Advice) -> vocab.Disposition:
        """Bring the scheduler to ``item``'s desired state (or record what would be done)."""
        key = (item.workload, item.attempt, item.generation)
        try:
            disposition = await self._reconcile_once(item)
        except Exception as exc:
            if not self._is_store_outage(exc):
                raise
            return self._stall(item, f"the audit store cannot be reached: {type(exc).__name__}: {exc}")
        if disposition is not vocab.Disposition.PENDING:
            self.stalled.discard(key)
        return disposition

    async def _reconcile_once(self, item: advice.Advice) -> vocab.Disposition:
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
                if self._is_store_outage(exc) or isinstance(exc, _ReadFailed) or await self._scheduler_down(job_id):
                    return self._stall(item, f"{type(exc).__name__}: {exc}")
                logger.exception("executor failed on %s generation %d", item.workload, item.generation)
                return await self.watchdog.abandon(item, f"executor error: {type(exc).__name__}: {exc}")
        except actions.FencedError as exc:
            return await self._fenced(item, exc)

    def _is_store_outage(self, exc: BaseException) -> bool:
        return self._store_outage is not None and self._store_outage(exc)

    async def _scheduler_down(self, job_id: str) -> bool:
        """After a failed step: whether the scheduler cannot be reached at all (a read fails too, with an
        error the engine classifies as an outage), as opposed to refusing the step or no longer knowing
        the job (then the generation is abandoned as before)."""
        if self._scheduler_outage is None:
            return False
        try:
            await self._scheduler.get_job(job_id)
        except Exception as exc:
            return self._scheduler_outage(exc)
        return False

    def _stall(self, item: advice.Advice, why: str) -> vocab.Disposition:
        """An outage stopped this generation: leave it pending (its intent rows say how far it got) for
        the engine to resume once the store and the scheduler answer again."""
        key = (item.workload, item.attempt, item.generation)
        if key in self.stalled:
            return vocab.Disposition.PENDING  # said once; retried quietly until the outage ends
        self.stalled.add(key)
        logger.warning("%s attempt %d generation %d: stopped by an outage, resumed when it ends: %s",
                       item.workload, item.attempt, item.generation, why)
        return vocab.Disposition.PENDING

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
        try:
            job = await self._scheduler.get_job(job_id)
            if not item.drain_nodes:
                return steps.Observation(job)
            return steps.Observation(job, {n.name: n for n in await self._scheduler.list_nodes()})
        except Exception as exc:
            if self._scheduler_outage is not None and self._scheduler_outage(exc):
                raise _ReadFailed(exc) from exc
            raise

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
        row = await self._ledger.finish_action(workload=item.workload, attempt=item.attempt,
                                               generation=item.generation, step=step.name, status=status,
                                               at=self._clock.now(), error=error, result=result)
        await ports.tell_node_change(self._on_node_change, row)

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
            refused = _refused_drains(plan, report)
            skip = f"{MONITOR_SKIP}; {WOULD_BLOCK}: {blocked}" if blocked else MONITOR_SKIP
            for step in plan:
                why = f"{MONITOR_SKIP}; {WOULD_REFUSE}: {_refusal(report)}" if step in refused else skip
                await self._ledger.begin_action(self._row(item, step, actions.ActionStatus.SKIPPED, why),
                                                at=self._clock.now())
            detail = f"monitor mode: would run {', '.join(s.name for s in plan if s not in refused) or 'nothing'}"
            if blocked:
                detail = f"monitor mode: Action mode would be blocked by a blast-radius limit: {blocked}"
                if report is not None and report.breaker_reason:
                    detail += " (an administrator's cap: the breaker would open)"
            elif refused:
                detail += f"; the drains would be refused: {_refusal(report)}"
            return await self._close(item, vocab.Disposition.MONITORED, detail, report)
        stop, _ = await self._stop_reason(item, job_id)
        if stop:
            return await self.watchdog.abandon(item, stop)
        report = None
        if not rows and self._blast_limit is not None:
            report = await self._blast_limit(item)
            if report.reason:
                return await self._refuse(item, plan, report)
            for step in _refused_drains(plan, report):
                rows[step.name] = await self._ledger.begin_action(
                    self._row(item, step, actions.ActionStatus.SKIPPED, f"{REFUSED}: {_refusal(report)}"),
                    at=self._clock.now())
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
        rows_now = await self._ledger.actions_for(item.workload, item.attempt, item.generation)
        theirs = {r.args.get("node") for r in rows_now if r.operation is actions.Operation.DRAIN_NODE
                  and r.status is actions.ActionStatus.SKIPPED and r.error.startswith((LEFT_NODE_ALONE, REFUSED))}
        wanted = item.model_copy(update={"drain_nodes": [n for n in item.drain_nodes if n not in theirs]})
        missing = steps.unmet(wanted, seen)
        if missing:
            return await self.watchdog.abandon(item, f"verify failed: {'; '.join(missing)}")
        detail = f"verified after {len(plan)} step(s)"
        refusals = [r for r in rows_now if r.status is actions.ActionStatus.SKIPPED and r.error.startswith(REFUSED)]
        if refusals:
            detail += f"; degraded: {refusals[0].error}"
        return await self._close(item, vocab.Disposition.CONVERGED, detail, report)

    async def _refuse(self, item: advice.Advice, plan: list[steps.Step],
                      report: limits.LimitReport) -> vocab.Disposition:
        """A limit refused the whole advice (even without its drains): every step skipped, the generation
        closed as Abandoned. An administrator's cap opened the breaker in the same decision."""
        for step in plan:
            await self._ledger.begin_action(
                self._row(item, step, actions.ActionStatus.SKIPPED, f"blocked: {report.reason}"), at=self._clock.now())
        detail = f"blocked by blast-radius limit: {report.reason}"
        if report.breaker_reason:
            detail = (f"blocked by an administrator's cap: {report.breaker_reason}; the breaker is open until a "
                      "person resets it (trainguard actions reset-breaker)")
        return await self._close(item, vocab.Disposition.ABANDONED, detail, report)

    async def _stop_reason(self, item: advice.Advice, job_id: str,
                           step: steps.Step | None = None) -> tuple[str, steps.Observation]:
        """Why this Action generation must stop before ``step`` (or before its first step): a key is
        off (``act.switch``), or somebody else changed the job meanwhile (``act.whose``); "" to go on.
        Also the fresh read of the job it judged, taken last (after the store's answers), so that the
        caller decides whether the step is in effect, and runs it, on a read as fresh as before these
        checks existed: a workload's own restart landing meanwhile must be seen, never repeated."""
        where = f"before step {step.name}" if step is not None else "before its first step"
        blocked = await self.switch.blocked()
        rows = await self._ledger.actions_for(item.workload, item.attempt, item.generation)
        ours = await self._ledger.actions_of(item.workload)
        seen = await self._observe(item, job_id)
        if blocked:
            return f"{SWITCHED_OFF} ({where}): {blocked}", seen
        change = whose.interference(seen.job, item.attempt, rows, ours)
        if change is not None:
            return f"{PERSONS_CHANGE} ({where}): {change}", seen
        return "", seen

    async def _skip_or_finish(self, item: advice.Advice, step: steps.Step, row: actions.ActionRecord | None,
                              why: str) -> None:
        """Record ``step`` as skipped with ``why`` (a new row, or the end of an intent from before a restart)."""
        if row is None:
            await self._ledger.begin_action(self._row(item, step, actions.ActionStatus.SKIPPED, why),
                                            at=self._clock.now())
        else:
            await self._finish(item, step, actions.ActionStatus.SKIPPED, why)

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
        stop, seen = await self._stop_reason(item, step.job_id, step)
        if stop:
            return stop
        if step.operation is actions.Operation.DRAIN_NODE and (theirs := _managed_by_a_person(step, seen)):
            await self._skip_or_finish(item, step, row, theirs)
            return ""
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
            if await self._scheduler_down(step.job_id):
                # Not a refusal: the scheduler cannot even be read. The intent row stays; the resume
                # re-reads the job and runs the step only if it did not take effect (exactly once).
                raise _ReadFailed(exc) from exc
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


def _refused_drains(plan: list[steps.Step], report: limits.LimitReport | None) -> list[steps.Step]:
    """The drain steps of ``plan`` a degraded ``report`` refused (the rest of the advice is allowed)."""
    if report is None or report.reason or not report.refused_drains:
        return []
    return [s for s in plan if s.operation is actions.Operation.DRAIN_NODE and s.nodes[0] in report.refused_drains]


def _refusal(report: limits.LimitReport | None) -> str:
    return next((c.reason for c in report.refused), "") if report is not None else ""


class _ReadFailed(Exception):
    """A read of the scheduler (the job, its nodes) failed with an error the engine calls an outage: the
    generation waits for the scheduler (``Executor._stall``); a read is never a refusal of a step. (A
    failed step is told apart by a second read, ``_scheduler_down``: that one may be refused.)"""

    def __str__(self) -> str:
        return str(self.__cause__ or self.args[0])


LEFT_NODE_ALONE = "left alone: a person manages the node"
"""Error text (prefix) of a drain step we skipped because someone else took the node out of service."""


def _managed_by_a_person(step: steps.Step, seen: steps.Observation) -> str:
    """Why a drain step must leave its node alone: the node is out of service (DOWN, DRAIN, FAIL...)
    for a reason that is not ours, so a person (or the site's health check) manages it; "" otherwise.
    Draining it would write our reason over theirs, and undrain would later return it to service."""
    node = seen.nodes.get(step.nodes[0])
    if node is None or node.usable or node.reason.startswith(undrain.OUR_PREFIX):
        return ""
    return f"{LEFT_NODE_ALONE}: {node.name} is {node.state} ({node.reason or 'no reason given'})"


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
