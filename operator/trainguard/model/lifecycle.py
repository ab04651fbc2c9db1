"""The node lifecycle: where a node stands between our first suspicion and its return to service.

A node is in service until a verdict names it (suspect); our drain, or on Kubernetes our exclusion
(a cordon plus taint for the whole cluster), takes it out of service; it comes back when our resume
is done (the time rule of ``act.undrain``, a person's undo or return). A node a person holds, or a
repeat offender (named again within the lemon window after its return), is held for repair and
stays out until a person clears it: no rule of time resumes it. Validating (a site's check run on
the node before its return) passes back to service or fails to held for repair; a check without a
verdict (timed out, not schedulable, the node vanished) leaves the node out of service.

A node out of service for someone else's reason is ``other``: shown, never touched; it is back in
service when it is seen so again.

Pure code: ``advance`` is the one place a transition is decided. The audit store writes each
transition as a row of ``node_lifecycle`` (``store.nodes``) in the same transaction as the record
that caused it, so the lifecycle and the audit records cannot disagree. A transition that is
refused leaves the state as it was (the caller records nothing, or tells the person why).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from trainguard.model import actions, advice


class NodeState(enum.StrEnum):
    """The states of ``trainguard nodes --format json`` (a contract: ``mission.md`` "Node lifecycle")."""

    IN_SERVICE = "in-service"
    SUSPECT = "suspect"
    OUT_OF_SERVICE = "out-of-service"
    VALIDATING = "validating"
    HELD_FOR_REPAIR = "held-for-repair"
    OTHER = "other"
    """Out of service for someone else's reason: never touched by us."""


class NodeEvent(enum.StrEnum):
    """What moves a node from one state to the next."""

    NAMED = "named"
    """A verdict named the node as a suspect (only nodes the workload was placed on)."""
    TAKEN_OUT = "taken-out"
    """Our drain or our cluster-wide exclusion of the node is done."""
    REPEAT_OFFENDER = "repeat-offender"
    """Taken out again within the lemon window after a return, or failed validation before: held."""
    VALIDATION_STARTED = "validation-started"
    VALIDATION_PASSED = "validation-passed"
    """The check passed; the node is resumed next (``RESUMED``)."""
    VALIDATION_FAILED = "validation-failed"
    VALIDATION_INCONCLUSIVE = "validation-inconclusive"
    """Timed out, not schedulable, or the node vanished: the node stays out, the check is due again."""
    RESUMED = "resumed"
    """Our resume of our own drain is done (time rule, a validation's pass, a person's undo)."""
    HELD = "held"
    """A person holds the node for repair."""
    CLEARED = "cleared"
    """A person clears the node for return: it is resumed at the next sweep, whatever the time rule says."""
    SEEN_OTHER = "seen-other"
    """A fresh read shows the node out of service for a reason that is not ours."""
    SEEN_BACK = "seen-back"
    """A fresh read shows the node in service again, returned by someone else."""


class Refused(Exception):
    """A transition the lifecycle does not allow; the state is unchanged."""


_OURS_OUT = (NodeState.OUT_OF_SERVICE, NodeState.VALIDATING, NodeState.HELD_FOR_REPAIR)
"""The states of a node that is out of service by our doing."""

TRANSITIONS: Mapping[tuple[NodeState, NodeEvent], NodeState] = {
    (NodeState.IN_SERVICE, NodeEvent.NAMED): NodeState.SUSPECT,
    (NodeState.SUSPECT, NodeEvent.NAMED): NodeState.SUSPECT,
    (NodeState.IN_SERVICE, NodeEvent.TAKEN_OUT): NodeState.OUT_OF_SERVICE,
    (NodeState.SUSPECT, NodeEvent.TAKEN_OUT): NodeState.OUT_OF_SERVICE,
    (NodeState.OTHER, NodeEvent.TAKEN_OUT): NodeState.OUT_OF_SERVICE,
    (NodeState.OUT_OF_SERVICE, NodeEvent.TAKEN_OUT): NodeState.OUT_OF_SERVICE,
    (NodeState.HELD_FOR_REPAIR, NodeEvent.TAKEN_OUT): NodeState.HELD_FOR_REPAIR,
    (NodeState.OUT_OF_SERVICE, NodeEvent.REPEAT_OFFENDER): NodeState.HELD_FOR_REPAIR,
    (NodeState.HELD_FOR_REPAIR, NodeEvent.REPEAT_OFFENDER): NodeState.HELD_FOR_REPAIR,
    (NodeState.OUT_OF_SERVICE, NodeEvent.VALIDATION_STARTED): NodeState.VALIDATING,
    (NodeState.VALIDATING, NodeEvent.VALIDATION_PASSED): NodeState.VALIDATING,
    (NodeState.VALIDATING, NodeEvent.VALIDATION_FAILED): NodeState.HELD_FOR_REPAIR,
    (NodeState.VALIDATING, NodeEvent.VALIDATION_INCONCLUSIVE): NodeState.OUT_OF_SERVICE,
    (NodeState.OUT_OF_SERVICE, NodeEvent.RESUMED): NodeState.IN_SERVICE,
    (NodeState.VALIDATING, NodeEvent.RESUMED): NodeState.IN_SERVICE,
    (NodeState.SUSPECT, NodeEvent.HELD): NodeState.HELD_FOR_REPAIR,
    (NodeState.OUT_OF_SERVICE, NodeEvent.HELD): NodeState.HELD_FOR_REPAIR,
    (NodeState.VALIDATING, NodeEvent.HELD): NodeState.HELD_FOR_REPAIR,
    (NodeState.HELD_FOR_REPAIR, NodeEvent.HELD): NodeState.HELD_FOR_REPAIR,
    (NodeState.HELD_FOR_REPAIR, NodeEvent.CLEARED): NodeState.OUT_OF_SERVICE,
    (NodeState.OUT_OF_SERVICE, NodeEvent.CLEARED): NodeState.OUT_OF_SERVICE,
    (NodeState.IN_SERVICE, NodeEvent.SEEN_OTHER): NodeState.OTHER,
    (NodeState.SUSPECT, NodeEvent.SEEN_OTHER): NodeState.OTHER,
    (NodeState.OUT_OF_SERVICE, NodeEvent.SEEN_OTHER): NodeState.OTHER,
    (NodeState.HELD_FOR_REPAIR, NodeEvent.SEEN_OTHER): NodeState.OTHER,
    (NodeState.VALIDATING, NodeEvent.SEEN_OTHER): NodeState.OTHER,
    (NodeState.OTHER, NodeEvent.SEEN_OTHER): NodeState.OTHER,
    (NodeState.OTHER, NodeEvent.SEEN_BACK): NodeState.IN_SERVICE,
    (NodeState.OUT_OF_SERVICE, NodeEvent.SEEN_BACK): NodeState.IN_SERVICE,
    (NodeState.HELD_FOR_REPAIR, NodeEvent.SEEN_BACK): NodeState.IN_SERVICE,
    (NodeState.VALIDATING, NodeEvent.SEEN_BACK): NodeState.IN_SERVICE,
}
"""Every allowed (state, event) -> next state; any other pair is refused. Notably refused: a resume of a
node held for repair (only a person's ``CLEARED`` lets it out of held), a hold of a node that is in
service or someone else's (we did not take it out), anything of ours on ``other`` but our own new drain."""

NO_CHANGE_EVENTS = frozenset({NodeEvent.NAMED})
"""Events that leave a node where it is when the table has no entry (a node already out named again),
rather than being refused: they are facts about the node, not decisions."""


def advance(state: NodeState, event: NodeEvent) -> NodeState:
    """The state after ``event``; raises ``Refused`` when the lifecycle does not allow it."""
    after = TRANSITIONS.get((state, event))
    if after is not None:
        return after
    if event in NO_CHANGE_EVENTS:
        return state
    raise Refused(f"a node {state.value} cannot be {_VERB[event]}")


def out_by_us(state: NodeState) -> bool:
    """Whether the node is out of service by our doing (drained, excluded, validating, held)."""
    return state in _OURS_OUT


_VERB: Mapping[NodeEvent, str] = {
    NodeEvent.NAMED: "named a suspect",
    NodeEvent.TAKEN_OUT: "taken out of service",
    NodeEvent.REPEAT_OFFENDER: "held as a repeat offender (it is not out of service by us)",
    NodeEvent.VALIDATION_STARTED: "validated (only a node we took out of service is)",
    NodeEvent.VALIDATION_PASSED: "passed (no validation runs)",
    NodeEvent.VALIDATION_FAILED: "failed (no validation runs)",
    NodeEvent.VALIDATION_INCONCLUSIVE: "left inconclusive (no validation runs)",
    NodeEvent.RESUMED: "resumed by a rule (only a person clears a node held for repair)",
    NodeEvent.HELD: "held (Trainguard did not take it out of service)",
    NodeEvent.CLEARED: "returned (Trainguard did not take it out of service)",
    NodeEvent.SEEN_OTHER: "seen out for another reason",
    NodeEvent.SEEN_BACK: "seen back in service (it is in service)",
}


class Transition(BaseModel):
    """One row of a node's lifecycle: the event, the state it led to, why, and who decided."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str
    state: NodeState
    event: NodeEvent
    reason: str = ""
    by: str = "trainguard"
    """``trainguard`` for our own rules; a person's name for a hold or a return."""
    at: float
    """Epoch seconds."""
    workload: str = ""
    attempt: int | None = None
    evidence: dict[str, Any] = Field(default_factory=dict)
    """What the transition rests on: the verdict's category, a check's output, the action row."""


def nodes_out(operation: str, args: Mapping[str, Any]) -> list[str]:
    """The nodes an action row (its operation and arguments) took out of service for the whole
    cluster: a drain's node; a Kubernetes workload's exclusions (cordon plus taint of each node);
    none for a Slurm job's ExcNodeList, which is the job's own."""
    if operation == actions.Operation.DRAIN_NODE and args.get("node"):
        return [str(args["node"])]
    if operation == actions.Operation.EXCLUDE_NODES and str(args.get("job_id", "")).startswith(
            advice.KUBERNETES_PREFIX):
        return [str(n) for n in args.get("excluded_nodes") or []]
    return []
