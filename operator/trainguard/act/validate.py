"""Validation before return: the site's check runs on a node we took out of service before we put it back.

Place in the loop: called by the undrain sweep (``act.undrain.Undrainer``) for a node whose return has come
(``exclusion.undrainAfter`` passed, or a person returned it) when its policy names a check
(``exclusion.validation``) and the scheduler can run one (``ports.NodeValidator``: Slurm over its commands;
Kubernetes, ``k8s.kubejobs.node_checks``, where our ``trainguard.dev/validating`` taint is the reservation and
the check a Job pinned to the node).
One call moves one round of validation of one node as far as it can without waiting; the next sweep goes on.

The order (learned on real Slurm, ``tests/integration/schedulers/test_validation_slurm.py``: a drained node
runs no job, not even one in our reservation):

1. ``validate_reserve``: our reservation of the node (``trainguard-validate-<node>``) keeps every user's job
   off it; lifecycle ``validation-started`` (out-of-service -> validating);
2. ``validate_open``: resume the node inside the reservation;
3. ``validate_submit``: the check, argv, pinned to the node in the reservation (its job named after the
   round, so a submit cut short by a restart is found rather than repeated);
4. wait, one read per sweep, until the check's verdict or ``validation.timeout`` after step 1;
5. ``validate_verdict``: the round's verdict with its evidence (exit code, the output's tail), one row;
6. passed: lifecycle ``validation-passed``; ``resume_node:<node>`` deletes the reservation: the node is back
   (``resumed``, in service). Failed: ``validate_drain`` drains it again with our reason, lifecycle
   ``validation-failed`` (held for repair, the check's evidence with it), ``validate_unreserve``.
   Inconclusive (timed out, ended without a verdict, lost by the scheduler, the node vanished): the check is
   cancelled if it still waits, the node drained again, ``validation-inconclusive`` (out of service), the
   reservation deleted; the re-drain is the drain the time rule counts from, so the node is due again one
   ``undrainAfter`` later (or when a person returns it).

Every scheduler step is an action row under the advice generation of the drain, its intent committed before
the scheduler is touched, its step key unique per round (``validate_reserve:node3#1``): a restart at any
point resumes where it stopped and never repeats a step that took effect; every scheduler operation is also
idempotent on its own (an existing reservation of ours, a node already resumed, a job already ended). A step
whose scheduler call fails stays an intent and is tried again at the next sweep; the round's timeout bounds
the whole. Every end of a round deletes our reservation.

People first: a node a person drains or re-labels (a reason not ours), or resumes before our step 2, during
the round is left alone (verdict ``left-alone``: our check cancelled, our reservation deleted, the node's
state untouched); a node a person holds for repair meanwhile is drained again with our reason and the round
abandoned (the person's hold stands).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

from trainguard.act import ports
from trainguard.model import actions, checks, clock, lifecycle, workloads

logger = logging.getLogger(__name__)

RESUME_STEP = "resume_node:"
"""Step prefix of our resume of one node (``resume_node:node3``): the end of a drain of ours, by the time rule,
a person's return or undo, or a passed validation (``act.undrain``)."""
OUR_PREFIX = "trainguard:"
"""The tag every drain reason of ours starts with (``schedulers.base.OUR_REASON_PREFIX``; act may not
import schedulers)."""
RESERVATION_MARGIN_MIN = 10
"""Minutes our reservation outlives the check's time limit: we delete it at the end of every round; if we
cannot (Trainguard stopped), Slurm ends it itself shortly after the check could have run."""
TAIL_CHARS = 2000
"""Characters of the check's output kept as evidence on the lifecycle row (the verdict lines)."""


@dataclasses.dataclass(frozen=True)
class Check:
    """What a policy's ``exclusion.validation`` asks (``policy.validation.Validation``), as ``act`` reads it."""

    command: tuple[str, ...]
    timeout_s: float
    output_dir: str
    partition: str | None = None
    image: str | None = None
    """The check's container image (Kubernetes; Slurm runs the command on the node itself)."""

    @property
    def minutes(self) -> int:
        """The check job's time limit (Slurm counts minutes)."""
        return max(1, math.ceil(self.timeout_s / 60))


class Verdict(enum.StrEnum):
    """How one round of validation ended."""

    PASSED = "passed"
    FAILED = "failed"
    INCONCLUSIVE = "inconclusive"
    LEFT_ALONE = "left-alone"
    """A person changed the node during the round: their decision, never undone."""
    ABANDONED = "abandoned"
    """A person held the node for repair during the round: drained again, the hold stands."""


@dataclasses.dataclass(frozen=True)
class _Steps:
    """The step keys of one round of one node."""

    node: str
    round: int

    def key(self, name: str) -> str:
        return f"validate_{name}:{self.node}#{self.round}"


_Rows = dict[str, actions.ActionRecord]


class Validation:
    """Runs the rounds of validation of the nodes the undrain sweep hands it; one per engine."""

    def __init__(self, validator: ports.NodeValidator, ledger: ports.Ledger, clock_: clock.Clock) -> None:
        self._scheduler = validator
        self._ledger = ledger
        self._clock = clock_

    @property
    def scheduler_name(self) -> str:
        return self._scheduler.name

    async def active(self, node: str, drain: actions.ActionRecord) -> bool:
        """Whether a round of ours on ``node`` under ``drain`` has begun and is not settled yet: it goes on
        whatever the time rule says now."""
        steps, rows = await self._round(node, drain)
        return steps.key("reserve") in rows or steps.key("verdict") in rows

    async def advance(self, node: str, drain: actions.ActionRecord, check: Check) -> actions.ActionRecord | None:
        """Move the current round of ``node`` on as far as it goes now (a new one when none is under way: the
        caller has just read the node drained by us); the last row written, None when it waits."""
        steps, rows = await self._round(node, drain)
        verdict = rows.get(steps.key("verdict"))
        try:
            if verdict is None:
                written = await self._run(node, drain, check, steps, rows)
                if written is None or written.operation is not actions.Operation.VALIDATE_NODE:
                    return written
                verdict = written
                rows[verdict.step] = verdict
            return await self._settle(node, drain, verdict, steps, rows)
        except actions.FencedError:
            raise
        except Exception as exc:  # a step that failed stays an intent: tried again at the next sweep
            logger.warning("validation of %s (round %d) waits: %s", node, steps.round, exc)
            return None

    # ------------------------------------------------------------------ the round up to its verdict

    async def _round(self, node: str, drain: actions.ActionRecord) -> tuple[_Steps, _Rows]:
        rows = {r.step: r for r in await self._ledger.actions_for(drain.workload, drain.attempt, drain.generation)}
        number = 1
        while _settled(rows, _Steps(node, number)):
            number += 1
        return _Steps(node, number), rows

    async def _run(self, node: str, drain: actions.ActionRecord, check: Check, steps: _Steps, rows: _Rows
                   ) -> actions.ActionRecord | None:
        now = self._clock.now()
        reserve = rows.get(steps.key("reserve"))
        if reserve is None:
            reserve = await self._begin(drain, steps, "reserve", actions.Operation.RESERVE_NODE, {
                "command": list(check.command), "timeout_s": check.timeout_s})
        deadline = reserve.created_at + check.timeout_s
        snapshot = next((n for n in await self._scheduler.list_nodes() if n.name == node), None)
        if snapshot is None:
            return await self._verdict(drain, steps, Verdict.INCONCLUSIVE,
                                       f"{self._scheduler.name} no longer knows {node}", vanished=True)
        state = await self._ledger.node_state(node)
        if state is not None and state.state is lifecycle.NodeState.HELD_FOR_REPAIR and reserve.created_at <= state.at:
            return await self._verdict(drain, steps, Verdict.ABANDONED,
                                       f"held for repair by {state.by} during validation ({state.reason})",
                                       job_id=_job(rows, steps))
        if reserve.status is actions.ActionStatus.INTENT:
            if now >= deadline:
                return await self._verdict(drain, steps, Verdict.INCONCLUSIVE, "not reserved within the timeout")
            name = await self._scheduler.reserve_node(node, check.minutes + RESERVATION_MARGIN_MIN)
            reserve = await self._finish(reserve, actions.ActionStatus.DONE, result={"reservation": name})
            await self._ledger.advance_node(
                node, lifecycle.NodeEvent.VALIDATION_STARTED, at=now, workload=drain.workload, attempt=drain.attempt,
                reason=f"validation: {check.command[0]} runs on {node} in our reservation {name}",
                evidence={"reservation": name, "command": list(check.command), "round": steps.round})
        opened = rows.get(steps.key("open"))
        if opened is None or opened.status is actions.ActionStatus.INTENT:
            theirs = await self._theirs(node, snapshot, before_open=opened is None)
            if theirs:
                return await self._verdict(drain, steps, Verdict.LEFT_ALONE, theirs)
            opened = opened or await self._begin(drain, steps, "open", actions.Operation.RESUME_RESERVED, {})
            if snapshot.drained:
                await self._scheduler.resume_node(node)
            await self._finish(opened, actions.ActionStatus.DONE)
        elif theirs := await self._theirs(node, snapshot, before_open=False):
            return await self._verdict(drain, steps, Verdict.LEFT_ALONE, theirs, job_id=_job(rows, steps))
        submit = rows.get(steps.key("submit"))
        tag = _tag(drain, steps)
        if submit is None or submit.status is actions.ActionStatus.INTENT:
            if now >= deadline:
                return await self._verdict(drain, steps, Verdict.INCONCLUSIVE, "the check was not submitted in time")
            job = await self._scheduler.find_check(tag) if submit is not None else None
            submit = submit or await self._begin(drain, steps, "submit", actions.Operation.SUBMIT_CHECK, {
                "command": list(check.command), "tag": tag, "partition": check.partition})
            job = job or await self._scheduler.submit_check(
                node, check.command, tag=tag, minutes=check.minutes, output_dir=check.output_dir,
                partition=check.partition, image=check.image)
            return await self._finish(submit, actions.ActionStatus.DONE, result={"job_id": job})
        job_id = str(submit.args["job_id"])
        status = await self._scheduler.check_status(job_id)
        phase = status.phase
        if phase is checks.CheckPhase.WAITING:
            if now < deadline:
                return None
            return await self._verdict(drain, steps, Verdict.INCONCLUSIVE,
                                       f"no verdict within the timeout ({check.timeout_s:.0f} s; job {status.state})",
                                       job_id=job_id, status=status, cancel=True)
        if phase is checks.CheckPhase.PASSED:
            return await self._verdict(drain, steps, Verdict.PASSED, "the check passed (exit 0)",
                                       job_id=job_id, status=status)
        if phase is checks.CheckPhase.FAILED:
            return await self._verdict(drain, steps, Verdict.FAILED, f"the check failed (exit {status.exit_code})",
                                       job_id=job_id, status=status)
        why = ("the scheduler no longer knows the check job" if phase is checks.CheckPhase.GONE
               else f"the check ended without a verdict ({status.state})")
        return await self._verdict(drain, steps, Verdict.INCONCLUSIVE, why, job_id=job_id, status=status)

    async def _theirs(self, node: str, snapshot: workloads.NodeSnapshot, *, before_open: bool) -> str:
        """Why a person's change of the node ends the round; "" when the node is as our steps left it. The
        lifecycle learns what the read showed (someone else's drain, or the node back by someone else)."""
        now = self._clock.now()
        if snapshot.drained and not snapshot.reason.startswith(OUR_PREFIX):
            await self._ledger.advance_node(node, lifecycle.NodeEvent.SEEN_OTHER, at=now,
                                            reason=f"out for someone else's reason: {snapshot.reason[:200]}")
            return f"left alone: {node} was drained for someone else's reason during validation " \
                   f"({snapshot.reason[:200]!r})"
        if before_open and not snapshot.drained:
            await self._ledger.advance_node(node, lifecycle.NodeEvent.SEEN_BACK, at=now,
                                            reason="back in service: resumed by someone else during validation")
            return f"left alone: {node} was resumed by someone else during validation"
        return ""

    async def _verdict(self, drain: actions.ActionRecord, steps: _Steps, verdict: Verdict, reason: str, *,
                       job_id: str | None = None, status: checks.CheckStatus | None = None, cancel: bool = False,
                       vanished: bool = False) -> actions.ActionRecord:
        logger.info("validation of %s (round %d): %s: %s", steps.node, steps.round, verdict.value, reason)
        args: dict[str, Any] = {"verdict": verdict.value, "reason": reason, "job_id": job_id, "vanished": vanished,
                                "cancel": bool(job_id) and (cancel or verdict in (Verdict.LEFT_ALONE,
                                                                                   Verdict.ABANDONED))}
        if status is not None:
            args.update(check_state=status.state, exit_code=status.exit_code,
                        output_tail=status.output_tail[-TAIL_CHARS:])
        return await self._begin(drain, steps, "verdict", actions.Operation.VALIDATE_NODE, args,
                                 status=actions.ActionStatus.DONE, error="" if verdict is Verdict.PASSED else reason)

    # ------------------------------------------------------------------ after the verdict

    async def _settle(self, node: str, drain: actions.ActionRecord, verdict: actions.ActionRecord, steps: _Steps,
                      rows: _Rows) -> actions.ActionRecord | None:
        kind = Verdict(verdict.args["verdict"])
        evidence = {k: verdict.args.get(k) for k in ("job_id", "exit_code", "check_state", "output_tail", "reason")}
        now = self._clock.now()
        if kind is Verdict.PASSED:
            await self._ledger.advance_node(node, lifecycle.NodeEvent.VALIDATION_PASSED, at=now,
                                            workload=drain.workload, attempt=drain.attempt, evidence=evidence,
                                            reason=f"validation passed (job {verdict.args.get('job_id')})")
            row = rows.get(RESUME_STEP + node) or await self._ledger.begin_action(actions.ActionRecord(
                workload=drain.workload, attempt=drain.attempt, generation=drain.generation, step=RESUME_STEP + node,
                operation=actions.Operation.RESUME_NODE, status=actions.ActionStatus.INTENT,
                args={"node": node, "drained_at": drain.updated_at, "validated": True, "round": steps.round,
                      "job_id": verdict.args.get("job_id")},
            ), at=now)
            await self._scheduler.unreserve_node(node)
            logger.info("%s passed validation: back in service", node)
            return await self._finish(row, actions.ActionStatus.DONE)
        job_id = verdict.args.get("job_id")
        if verdict.args.get("cancel") and job_id:
            await self._step(drain, steps, rows, "cancel", operation=actions.Operation.CANCEL_CHECK,
                             args={"job_id": job_id}, call=lambda: self._scheduler.cancel_check(str(job_id)))
        if kind is not Verdict.LEFT_ALONE and not verdict.args.get("vanished"):
            reason = (f"{OUR_PREFIX} failed validation (exit {verdict.args.get('exit_code')}), held for repair"
                      if kind is Verdict.FAILED else f"{OUR_PREFIX} validation {kind.value}: {verdict.args['reason']}")
            await self._step(drain, steps, rows, "drain", operation=actions.Operation.DRAIN_NODE,
                             args={"reason": reason}, call=lambda: self._scheduler.drain_node(node, reason))
        event = {Verdict.FAILED: lifecycle.NodeEvent.VALIDATION_FAILED,
                 Verdict.INCONCLUSIVE: lifecycle.NodeEvent.VALIDATION_INCONCLUSIVE}.get(kind)
        if event is not None:
            await self._ledger.advance_node(node, event, at=now, workload=drain.workload, attempt=drain.attempt,
                                            evidence=evidence,
                                            reason=f"validation {kind.value}: {verdict.args['reason']}")
        row = await self._step(drain, steps, rows, "unreserve", operation=actions.Operation.UNRESERVE_NODE,
                               args={}, call=lambda: self._scheduler.unreserve_node(node))
        if kind is Verdict.LEFT_ALONE and RESUME_STEP + node not in rows:
            # the drain is no longer ours to end: settled as the time rule settles it (act.undrain)
            return await self._ledger.begin_action(actions.ActionRecord(
                workload=drain.workload, attempt=drain.attempt, generation=drain.generation, step=RESUME_STEP + node,
                operation=actions.Operation.RESUME_NODE, status=actions.ActionStatus.SKIPPED,
                error=str(verdict.args["reason"]), args={"node": node, "drained_at": drain.updated_at}), at=now)
        return row

    async def _step(self, drain: actions.ActionRecord, steps: _Steps, rows: _Rows, name: str, *,
                    operation: actions.Operation, args: dict[str, Any],
                    call: Callable[[], Awaitable[None]]) -> actions.ActionRecord:
        """One follow-up step, at most once: its intent, the scheduler call, done."""
        row = rows.get(steps.key(name))
        if row is not None and row.status is not actions.ActionStatus.INTENT:
            return row
        row = row or await self._begin(drain, steps, name, operation, args)
        rows[row.step] = row
        await call()
        row = await self._finish(row, actions.ActionStatus.DONE)
        rows[row.step] = row
        return row

    # ------------------------------------------------------------------ rows

    async def _begin(self, drain: actions.ActionRecord, steps: _Steps, name: str, operation: actions.Operation,
                     args: dict[str, Any], *, status: actions.ActionStatus = actions.ActionStatus.INTENT,
                     error: str = "") -> actions.ActionRecord:
        return await self._ledger.begin_action(actions.ActionRecord(
            workload=drain.workload, attempt=drain.attempt, generation=drain.generation, step=steps.key(name),
            operation=operation, status=status, error=error,
            args={"node": steps.node, "round": steps.round, "drained_at": drain.updated_at, **args},
        ), at=self._clock.now())

    async def _finish(self, row: actions.ActionRecord, status: actions.ActionStatus, *,
                      result: dict[str, Any] | None = None) -> actions.ActionRecord:
        return await self._ledger.finish_action(
            workload=row.workload, attempt=row.attempt, generation=row.generation, step=row.step, status=status,
            at=self._clock.now(), result=result)


def _settled(rows: _Rows, steps: _Steps) -> bool:
    """Whether the round has its verdict and every step after it is done."""
    verdict = rows.get(steps.key("verdict"))
    if verdict is None:
        return False
    if verdict.args.get("verdict") == Verdict.PASSED:
        resumed = rows.get(RESUME_STEP + steps.node)
        return resumed is not None and resumed.status is not actions.ActionStatus.INTENT
    unreserved = rows.get(steps.key("unreserve"))
    return unreserved is not None and unreserved.status is actions.ActionStatus.DONE


def _job(rows: _Rows, steps: _Steps) -> str | None:
    submit = rows.get(steps.key("submit"))
    return str(submit.args["job_id"]) if submit is not None and submit.args.get("job_id") else None


def _tag(drain: actions.ActionRecord, steps: _Steps) -> str:
    """The round's check job name suffix: the same for the same round whatever process submits it."""
    text = f"{drain.workload}|{drain.attempt}|{drain.generation}|{steps.node}|{steps.round}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]
