"""Blast-radius evaluation results: which limit, its figures, and whether it would block.

``policy.blast_radius`` computes them; the executor (``act/``) records them on the outcome of
every advice generation in both modes, so Monitor data shows what Action mode would have
refused. They live in ``model`` because policy and act may only meet here.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

ACTIONS_PER_HOUR = "maxActionsPerHour"
DRAINED_SHARE = "maxDrainedShare"


class LimitCheck(BaseModel):
    """One limit evaluated against one advice.

    For ``maxActionsPerHour``: ``in_window`` operations counted in the rolling hour plus
    ``planned`` ones of this advice against ``maximum``. For ``maxDrainedShare`` (one check per
    partition a node to drain belongs to): ``drained_by_us`` of the partition's
    ``partition_nodes`` nodes drained by us now, ``planned`` more, giving ``share`` against
    ``maximum``.
    """

    model_config = ConfigDict(frozen=True)

    limit: str
    maximum: float
    planned: int
    would_block: bool
    reason: str = ""
    in_window: int | None = None
    partition: str | None = None
    partition_nodes: int | None = None
    drained_by_us: int | None = None
    share: float | None = None


class LimitReport(BaseModel):
    """Every limit evaluated for one advice, and which history the window counted."""

    model_config = ConfigDict(frozen=True)

    checks: list[LimitCheck] = Field(default_factory=list)
    counted: str = ""
    """Which operations the actions-per-hour window counted (they differ by mode)."""

    @property
    def would_block(self) -> bool:
        return any(c.would_block for c in self.checks)

    @property
    def reason(self) -> str | None:
        """The first blocking reason, or None when every limit allows the advice."""
        return next((c.reason for c in self.checks if c.would_block), None)

    def payload(self) -> dict[str, Any]:
        """The audit form: ``would_block``, ``reason``, ``counted`` and each check's figures."""
        return {
            "would_block": self.would_block,
            "reason": self.reason,
            "counted": self.counted,
            "checks": [c.model_dump(mode="json", exclude_none=True) for c in self.checks],
        }
