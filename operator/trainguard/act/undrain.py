"""Resuming the nodes we took out of service: ours end by a rule of time, never a person's.

Place in the loop: run by the engine's sweep (``engine.Engine.sweep``) after the watchdog. The
rule (docs/policy.md "Resuming drained nodes"): a node is resumed once ``exclusion.undrainAfter``
of the policy under which we drained it has passed since our drain completed, if

- our audit store holds that drain (a ``drain_node`` action row with status done) and the
  advice generation that drained it is closed (the executor is done with it);
- a fresh read of the node, right before the resume, shows it still drained with a reason that
  starts with our tag (``trainguard:``); the adapter checks the tag once more itself. A node a
  person resumed, drained again or re-labelled is left alone, and that is recorded once;
- the policy still exists and is in Action mode with the cluster-wide switch on. In Monitor
  mode the resume is recorded as would-resume (status skipped) and nothing is changed.

Time, not health, is the rule: Trainguard sees a node's health only through the failures of
jobs that run on it, and a drained node runs none. A node that fails again after its resume is
a lemon again (lemon memory keeps its incidents for ``lemonNodeWindow``) and is drained again.
A node that is down when its time comes (Slurm ``DOWN``, a Kubernetes node not Ready) waits until
it is up: putting back a node nobody can use would only hide it.

Out of service means a drain (a ``drain_node`` row: Slurm's drain, a Kubernetes node's cordon and
taint, a cordon on Slinky) and, on Kubernetes, an exclusion too: a workload's requeue that excludes
nodes cordons and taints each of them for the whole cluster (an ``exclude_nodes`` row of a
workload whose restart is a suspend cycle, ``model.lifecycle.nodes_out``). Both end by this one rule.
A Slurm exclusion is the job's own ``ExcNodeList`` and nobody else's: nothing to lift.

Every resume is an action row (``resume_node:<node>``) under the advice generation that drained
the node: the intent is committed before the scheduler is touched, and the unique key makes it
happen at most once per drain, across restarts.

With a policy's ``exclusion.validation`` and a scheduler that can run a check (``ports.NodeValidator``),
the return that has come (by time or a person's return) goes through ``act.validate`` instead: the site's
check must pass before the node is back. A round under way goes on whatever the time rule says (and waits
while actions are off); a person's undo through the API is refused while it runs. Under a scheduler without
the operations the node returns by these rules alone, and its resume row says the check was unsupported.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Any

from trainguard.act import ports, validate
from trainguard.model import actions, clock, lifecycle, vocab

logger = logging.getLogger(__name__)

RESUME_STEP = validate.RESUME_STEP
"""Step prefix of our resume of one node (``resume_node:node3``)."""
WOULD_RESUME_STEP = "would_resume_node:"
"""Step prefix of the record of a resume that Monitor mode did not carry out."""
WOULD_VALIDATE_STEP = "would_validate_node:"
"""Step prefix of the record of a validation (then a resume) that Monitor mode did not carry out."""
OUR_PREFIX = validate.OUR_PREFIX
"""The tag every drain reason of ours starts with (``schedulers.base.OUR_REASON_PREFIX``; act may not
import schedulers)."""


@dataclasses.dataclass(frozen=True)
class UndrainRule:
    """What the policy that drained a node says about resuming it."""

    after_s: float | None
    """``exclusion.undrainAfter`` in seconds; None: never resumed automatically."""
    mode: vocab.Mode
    """The effective mode (Monitor when the cluster-wide switch is off)."""
    lemon_window_s: float | None = None
    """``exclusion.lemonNodeWindow`` in seconds: a node we take out again this soon after our return of it
    is a repeat offender, held for repair until a person clears it. None: no such rule."""
    validation: validate.Check | None = None
    """``exclusion.validation``: the check the node must pass before its return (``act.validate``); None:
    the node returns without one."""


class NotOurs(Exception):
    """An undo was asked for a node whose drain is not ours (or no longer ours): nothing was done."""


RuleOf = Callable[[str], UndrainRule | None]
"""Policy name -> its undrain rule; None when no such policy exists any more (nothing is resumed)."""

_Key = tuple[str, int, int]

DOWN_WORDS = frozenset({"DOWN", "FAIL", "NOT_RESPONDING", "POWERED_DOWN", "POWER_DOWN"})
"""Node state words that mean nobody can use the node now (Slurm's; a Kubernetes node not Ready reads DOWN)."""


def nodes_out(operation: str, args: Mapping[str, Any]) -> list[str]:
    """The nodes an action row took out of service for the whole cluster (``model.lifecycle.nodes_out``)."""
    return lifecycle.nodes_out(operation, args)


class Undrainer:
    """Resumes our drained nodes once their policy's time has passed; one per engine."""

    def __init__(self, scheduler: ports.NodeScheduler, ledger: ports.Ledger, clock_: clock.Clock,
                 rule_of: RuleOf, *, validator: ports.NodeValidator | None = None,
                 on_node_change: ports.NodeChanged | None = None) -> None:
        self._scheduler = scheduler
        self._on_node_change = on_node_change
        """Told of each resume done, by time or by a person's undo (``ports.tell_node_change``)."""
        self._validation = validate.Validation(validator, ledger, clock_) if validator is not None else None
        """Runs the policies' checks; None: the scheduler cannot run one, nodes return by the rules alone."""
        self._ledger = ledger
        self._clock = clock_
        self._rule_of = rule_of
        self._policy_of: dict[_Key, str] = {}
        """Advice key -> its policy name (advice rows never change)."""

    async def _out_of_service(self) -> dict[str, actions.ActionRecord]:
        """Node -> the latest done row of ours that took it out of service (see the module doc)."""
        rows = await self._ledger.actions_by_operation([actions.Operation.DRAIN_NODE, actions.Operation.EXCLUDE_NODES])
        latest: dict[str, actions.ActionRecord] = {}
        for row in rows:  # oldest first: a node taken out twice waits for the later one
            if row.status is actions.ActionStatus.DONE:
                for node in nodes_out(row.operation, row.args):
                    latest[node] = row
        return latest

    async def sweep(self) -> list[actions.ActionRecord]:
        """One pass: the resume (or would-resume, or left-alone) rows written in it."""
        try:
            await self._others()
        except Exception as exc:  # an observation only: a failed read must not stop the resumes below
            logger.warning("node lifecycle: reading the nodes for others' drains failed: %s", exc)
        latest = await self._out_of_service()
        if not latest:
            return []
        done: dict[tuple[str, int, int, str], actions.ActionRecord] = {
            (r.workload, r.attempt, r.generation, r.step): r
            for r in await self._ledger.actions_by_operation([actions.Operation.RESUME_NODE])
        }
        written: list[actions.ActionRecord] = []
        for node, drain in sorted(latest.items()):
            row = await self._consider(node, drain, done)
            if row is not None:
                written.append(row)
        return written

    async def _repeat_offender(self, node: str, drain: actions.ActionRecord, window_s: float) -> bool:
        """Whether ``drain`` took the node out again within ``window_s`` of our last return of it; if so the
        lifecycle holds it for repair (once), and no rule of time resumes it until a person clears it."""
        if drain.step.startswith("validate_"):
            return False  # our drain again after a check without a pass: not a new incident of the node
        history = await self._ledger.node_transitions(node)
        back = [t for t in history if t.event is lifecycle.NodeEvent.RESUMED and t.at < drain.updated_at]
        if not back or drain.updated_at - back[-1].at > window_s:
            return False
        gap = drain.updated_at - back[-1].at
        await self._ledger.advance_node(
            node, lifecycle.NodeEvent.REPEAT_OFFENDER, at=self._clock.now(), workload=drain.workload,
            attempt=drain.attempt, evidence={"returned_at": back[-1].at, "taken_out_at": drain.updated_at},
            reason=f"repeat offender: taken out again {gap:.0f} s after its return (lemonNodeWindow "
                   f"{window_s:.0f} s): held until a person returns it")
        return True

    async def _others(self) -> None:
        """The lifecycle learns of nodes out of service for someone else's reason (``other``: shown, never
        touched) and of such nodes back in service, from one fresh read of the nodes."""
        known = {t.node: t.state for t in await self._ledger.node_states()}
        now = self._clock.now()
        for snapshot in await self._scheduler.list_nodes():
            state = known.get(snapshot.name)
            theirs = snapshot.drained and not snapshot.reason.startswith(OUR_PREFIX)
            if theirs and state is not lifecycle.NodeState.OTHER:
                await self._ledger.advance_node(snapshot.name, lifecycle.NodeEvent.SEEN_OTHER, at=now,
                                                reason=f"out for someone else's reason: {snapshot.reason[:200]}")
            elif not snapshot.drained and state is lifecycle.NodeState.OTHER:
                await self._ledger.advance_node(snapshot.name, lifecycle.NodeEvent.SEEN_BACK, at=now,
                                                reason="back in service (returned by someone else)")

    async def _consider(
        self, node: str, drain: actions.ActionRecord, done: dict[tuple[str, int, int, str], actions.ActionRecord],
    ) -> actions.ActionRecord | None:
        key = (drain.workload, drain.attempt, drain.generation)
        resumed = done.get((*key, RESUME_STEP + node))
        if resumed is not None and resumed.status is not actions.ActionStatus.INTENT:
            return None  # settled: resumed, failed once, or left alone (recorded)
        rule = await self._rule(key)
        if rule is None:
            return None
        check = rule.validation if self._validation is not None else None
        if check is not None and self._validation is not None and await self._validation.active(node, drain):
            if rule.mode is not vocab.Mode.ACTION:
                return None  # a round under way waits while actions are off; its timeout still counts
            return await self._validation.advance(node, drain, check)
        now = self._clock.now()
        state = await self._ledger.node_state(node)
        if state is not None and state.state is lifecycle.NodeState.HELD_FOR_REPAIR:
            return None  # held for repair: only a person clears it (model.lifecycle)
        cleared = state is not None and state.event is lifecycle.NodeEvent.CLEARED
        if not cleared and rule.lemon_window_s and await self._repeat_offender(node, drain, rule.lemon_window_s):
            return None
        if not cleared and (rule.after_s is None or now < drain.updated_at + rule.after_s):
            return None
        if await self._ledger.get_outcome(*key) is None:
            return None  # the executor still works on the generation that drained it
        if await self._down(node):
            return None  # waits until the node is up (module doc)
        if rule.mode is not vocab.Mode.ACTION:
            would = WOULD_VALIDATE_STEP if check is not None else WOULD_RESUME_STEP
            if (*key, would + node) in done:
                return None
            verb = f"validate ({check.command[0]}) and then resume" if check is not None else "resume"
            note = f"Monitor mode: would {verb} {node}, drained by us {now - drain.updated_at:.0f} s ago (undrainAfter)"
            return await self._record(drain, would + node, actions.ActionStatus.SKIPPED, rule=rule, node=node,
                                      note=note)
        why_not = await self._not_ours(node)
        if why_not and resumed is not None:  # our intent from before a restart: settle it by what the node shows
            return await self._finish(resumed, actions.ActionStatus.SKIPPED, why_not)
        if why_not:
            return await self._record(drain, RESUME_STEP + node, actions.ActionStatus.SKIPPED, rule=rule, node=node,
                                      note=why_not)
        if check is not None and self._validation is not None and resumed is None:
            return await self._validation.advance(node, drain, check)
        row = resumed or await self._record(drain, RESUME_STEP + node, actions.ActionStatus.INTENT, rule=rule,
                                            node=node, note="")
        try:
            await self._scheduler.resume_node(node)
        except Exception as exc:  # any failure is recorded on the row; the other nodes are still swept
            logger.warning("resume of %s (drained by %s) failed: %s", node, drain.workload, exc)
            return await self._finish(row, actions.ActionStatus.FAILED, str(exc)[:1000])
        logger.info("resumed %s: drained by us for %s %.0f s ago (%s)", node, drain.workload,
                    now - drain.updated_at, "cleared by a person" if cleared else f"undrainAfter {rule.after_s:.0f} s")
        return await self._finish(row, actions.ActionStatus.DONE, "")

    async def undo(self, node: str, *, by: str) -> actions.ActionRecord:
        """A person's undo of our latest drain of ``node`` (the HTTP API), before ``undrainAfter``.

        Only our own change is undone: our audit store must hold a done drain of the node, and a
        fresh read must show it still drained with our reason (the adapter checks the tag again).
        Raises ``NotOurs`` (nothing written, nothing touched) otherwise. The resume is the same
        action row the time rule writes (``resume_node:<node>`` under the drain's generation), with
        who asked for it, so it happens at most once per drain whoever asks.
        """
        drain = (await self._out_of_service()).get(node)
        if drain is None:
            raise NotOurs(f"Trainguard did not drain {node}: nothing of ours to undo")
        key = (drain.workload, drain.attempt, drain.generation)
        existing = next((r for r in await self._ledger.actions_for(*key) if r.step == RESUME_STEP + node), None)
        if existing is not None and existing.status is not actions.ActionStatus.INTENT:
            raise NotOurs(f"our drain of {node} is already settled ({existing.status.value}"
                          f"{': ' + existing.error if existing.error else ''})")
        if self._validation is not None and await self._validation.active(node, drain):
            raise NotOurs(f"a validation of {node} is under way: it returns the node when its check passes")
        why_not = await self._not_ours(node)
        if why_not:
            raise NotOurs(why_not)
        state = await self._ledger.node_state(node)
        if state is not None and state.state is lifecycle.NodeState.HELD_FOR_REPAIR:
            await self._ledger.decide_node(node, lifecycle.NodeEvent.CLEARED, by=by, channel="api",
                                           at=self._clock.now(), reason=f"undo of our drain asked by {by}")
        row = existing or await self._ledger.begin_action(actions.ActionRecord(
            workload=drain.workload, attempt=drain.attempt, generation=drain.generation, step=RESUME_STEP + node,
            operation=actions.Operation.RESUME_NODE, status=actions.ActionStatus.INTENT,
            args={"node": node, "drained_at": drain.updated_at, "requested_by": by},
            decided_by=vocab.Decider.OPERATOR,
        ), at=self._clock.now())
        try:
            await self._scheduler.resume_node(node)
        except Exception as exc:
            logger.warning("undo of our drain of %s (asked by %s) failed: %s", node, by, exc)
            return await self._finish(row, actions.ActionStatus.FAILED, str(exc)[:1000])
        logger.info("resumed %s on request of %s: drained by us for %s", node, by, drain.workload)
        return await self._finish(row, actions.ActionStatus.DONE, "")

    async def _rule(self, key: _Key) -> UndrainRule | None:
        if key not in self._policy_of:
            item = await self._ledger.get_advice(*key)
            if item is None:
                return None
            self._policy_of[key] = item.policy
        return self._rule_of(self._policy_of[key])

    async def _down(self, node: str) -> bool:
        snapshot = next((n for n in await self._scheduler.list_nodes() if n.name == node), None)
        return snapshot is not None and any(word.rstrip("*~#%$@!^-") in DOWN_WORDS
                                            for word in snapshot.state.upper().split("+"))

    async def _not_ours(self, node: str) -> str:
        """Why the node must be left alone, from a fresh read; "" when it is still our drain. The lifecycle
        learns what the read showed: the node back in service, or out for someone else's reason."""
        snapshot = next((n for n in await self._scheduler.list_nodes() if n.name == node), None)
        if snapshot is None:
            return f"left alone: {self._scheduler.name} no longer knows {node}"
        if not snapshot.drained:
            await self._ledger.advance_node(node, lifecycle.NodeEvent.SEEN_BACK, at=self._clock.now(),
                                            reason="back in service: resumed by someone else")
            return f"left alone: {node} is no longer drained (resumed by someone else)"
        if not snapshot.reason.startswith(OUR_PREFIX):
            await self._ledger.advance_node(node, lifecycle.NodeEvent.SEEN_OTHER, at=self._clock.now(),
                                            reason=f"out for someone else's reason: {snapshot.reason[:200]}")
            return f"left alone: {node}'s drain reason is no longer ours ({snapshot.reason[:200]!r})"
        return ""

    async def _record(self, drain: actions.ActionRecord, step: str, status: actions.ActionStatus, *,
                      rule: UndrainRule, node: str, note: str) -> actions.ActionRecord:
        if note and status is not actions.ActionStatus.INTENT:
            logger.info("%s", note)
        args: dict[str, Any] = {"node": node, "drained_at": drain.updated_at, "undrain_after_s": rule.after_s}
        if rule.validation is not None and self._validation is None:
            logger.warning("%s cannot run the validation check of %s's policy: %s returns without it",
                           self._scheduler.name, node, node)
            args["validation"] = f"unsupported by {self._scheduler.name}: returned by the time rule alone"
        return await self._ledger.begin_action(actions.ActionRecord(
            workload=drain.workload, attempt=drain.attempt, generation=drain.generation, step=step,
            operation=actions.Operation.RESUME_NODE, status=status, error=note, args=args,
        ), at=self._clock.now())

    async def _finish(self, row: actions.ActionRecord, status: actions.ActionStatus, error: str
                      ) -> actions.ActionRecord:
        done = await self._ledger.finish_action(
            workload=row.workload, attempt=row.attempt, generation=row.generation, step=row.step, status=status,
            at=self._clock.now(), error=error,
        )
        await ports.tell_node_change(self._on_node_change, done)
        return done
