"""Action and outcome records: what the executor did (or would do) for one advice generation.

The executor (``act/``) writes them through the audit store (``store/``) and reads them back
after a restart; they live here because both stages need them and may only meet through
``model``. Every record is keyed by (workload, attempt, generation), actions also by step.
"""

from __future__ import annotations

import enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from trainguard.model import vocab


class Operation(enum.StrEnum):
    """Scheduler operations the executor performs, one per named step."""

    REQUEUE = "requeue"
    REQUEUE_HOLD = "requeue_hold"
    EXCLUDE_NODES = "exclude_nodes"
    RELEASE = "release"
    HOLD = "hold"
    CANCEL = "cancel"
    DRAIN_NODE = "drain_node"
    RESUME_NODE = "resume_node"
    """Undo our own drain (``act.undrain``): recorded under the advice generation that drained the node."""
    RESERVE_NODE = "reserve_node"
    """Validation (``act.validate``): our reservation of the node, so no user job lands on it while it is checked."""
    RESUME_RESERVED = "resume_reserved"
    """Validation: resume our drained node inside our reservation (a drained node runs no job, not even ours)."""
    SUBMIT_CHECK = "submit_check"
    """Validation: the site's check submitted as a job pinned to the node in our reservation."""
    CANCEL_CHECK = "cancel_check"
    """Validation: cancel our check job that gave no verdict in time."""
    VALIDATE_NODE = "validate_node"
    """Validation: the verdict of one round (passed, failed, inconclusive, left alone), with its evidence."""
    UNRESERVE_NODE = "unreserve_node"
    """Validation: delete our reservation once the node is drained again (failed, inconclusive, abandoned)."""

    @property
    def places_hold(self) -> bool:
        """True when the operation leaves the job held by us until a release."""
        return self in (Operation.HOLD, Operation.REQUEUE_HOLD)


HOLD_SEEN = "hold_seen"
"""Argument of our hold rows: the job's hold as the scheduler showed it right after we placed it
(absent when the step placed none: a Kubernetes workload whose own failure policy restarted it)."""


class ActionStatus(enum.StrEnum):
    """Life of one action row: the intent is committed before the scheduler is touched."""

    INTENT = "intent"
    DONE = "done"
    FAILED = "failed"
    SKIPPED = "skipped"


class ActionRecord(BaseModel):
    """One named step of one advice generation, as persisted.

    ``step`` is unique within (workload, attempt, generation), e.g. ``requeue_hold`` or
    ``drain_node:node3`` or ``watchdog_release``; ``operation`` is what it asks of the scheduler.
    """

    model_config = ConfigDict(frozen=True)

    workload: str
    attempt: int
    generation: int
    step: str
    operation: Operation
    args: dict[str, Any] = Field(default_factory=dict)
    status: ActionStatus = ActionStatus.INTENT
    error: str = ""
    decided_by: vocab.Decider = vocab.Decider.POLICY_ENGINE
    created_at: float = 0.0
    updated_at: float = 0.0
    fence: str = ""
    """Leadership token the intent was committed with (``FenceToken.describe``); empty: standalone."""


class OutcomeRecord(BaseModel):
    """How the reconciliation of one advice generation ended (written once per key)."""

    model_config = ConfigDict(frozen=True)

    workload: str
    attempt: int
    generation: int
    disposition: vocab.Disposition
    detail: str = ""
    decided_by: vocab.Decider = vocab.Decider.POLICY_ENGINE
    at: float = 0.0
    limits: dict[str, Any] | None = None
    """The blast-radius evaluation of the generation (``model.limits.LimitReport.payload``), in
    both modes; written to the outcome's audit record (``blast_radius``), not read back."""


class FenceToken(BaseModel):
    """Proof of leadership that every scheduler mutation carries (several replicas, one acting).

    ``term`` is assigned by the audit store when a replica claims leadership (``claim_leadership``),
    one more than the previous claim of the same ``lease``; the store refuses an action intent whose
    token is not the latest claim, in the same transaction that would commit the intent. So a replica
    that lost its Lease cannot begin a scheduler mutation after the new leader claimed, whatever its
    own clock or its view of the Lease says.
    """

    model_config = ConfigDict(frozen=True)

    lease: str
    holder: str
    term: int

    def describe(self) -> str:
        """``holder@lease#term``, as written into action rows and the audit stream."""
        return f"{self.holder}@{self.lease}#{self.term}"


class FencedError(Exception):
    """This instance is no longer the leader: the scheduler mutation it was about to begin is refused.

    Raised by a ``Fence`` that knows leadership is lost and by the audit store when the token is not
    the current one. Not a failure of the recovery: the generation stays pending for the new leader,
    which resumes it from the action rows.
    """
