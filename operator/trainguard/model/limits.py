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
CAP_ACTIONS_PER_HOUR = "cluster cap max-actions-per-hour"
CAP_NODES_OUT = "cluster cap max-nodes-out"
CAP_NODES_OUT_SHARE = "cluster cap max-nodes-out-share"
"""The cluster administrator's caps (``AdminCaps``): above every policy; one that trips opens the breaker."""


class AdminCaps(BaseModel):
    """Caps owned by the cluster administrator (process settings, not policies): a policy can only be
    stricter. None turns a cap off. ``nodes_out`` and ``nodes_out_share`` count the nodes we took out of
    service (drained with our reason, plus drains decided and not carried out yet); the share is checked
    against the whole cluster and against each partition a node to drain belongs to."""

    model_config = ConfigDict(frozen=True)

    actions_per_hour: int | None = None
    nodes_out: int | None = None
    nodes_out_share: float | None = None


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
    cap: bool = False
    """An administrator's cap (``AdminCaps``), not the policy's limit: when it blocks, the breaker opens."""


class LimitReport(BaseModel):
    """Every limit evaluated for one advice, and which history the window counted."""

    model_config = ConfigDict(frozen=True)

    checks: list[LimitCheck] = Field(default_factory=list)
    counted: str = ""
    """Which operations the actions-per-hour window counted (they differ by mode)."""
    refused_drains: list[str] = Field(default_factory=list)
    """Degraded advice: the nodes whose drain a limit refused; the rest of the advice (the requeue with
    its exclusions) is allowed by ``checks``, which are the figures of that rest."""
    refused: list[LimitCheck] = Field(default_factory=list)
    """Degraded advice: the checks of the whole advice that refused the drains."""

    @property
    def would_block(self) -> bool:
        return any(c.would_block for c in self.checks)

    @property
    def breaker_reason(self) -> str | None:
        """The first blocking administrator's cap (it opens the breaker), or None."""
        return next((c.reason for c in self.checks if c.would_block and c.cap), None)

    @property
    def reason(self) -> str | None:
        """The first blocking reason, or None when every limit allows the advice."""
        return next((c.reason for c in self.checks if c.would_block), None)

    def payload(self) -> dict[str, Any]:
        """The audit form: ``would_block``, ``reason``, ``counted`` and each check's figures."""
        payload: dict[str, Any] = {
            "would_block": self.would_block,
            "reason": self.reason,
            "counted": self.counted,
            "checks": [_check(c) for c in self.checks],
        }
        if self.refused_drains:
            payload["refused_drains"] = list(self.refused_drains)
            payload["refused"] = [_check(c) for c in self.refused]
        if self.breaker_reason:
            payload["breaker"] = self.breaker_reason
        return payload


def _check(check: LimitCheck) -> dict[str, Any]:
    figures = check.model_dump(mode="json", exclude_none=True)
    if not check.cap:
        figures.pop("cap", None)
    return figures
