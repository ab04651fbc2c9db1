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

    @property
    def places_hold(self) -> bool:
        """True when the operation leaves the job held by us until a release."""
        return self in (Operation.HOLD, Operation.REQUEUE_HOLD)


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
