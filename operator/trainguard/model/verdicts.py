"""Verdict: attribution's answer to an anomaly."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from trainguard.model import evidence, vocab


class Verdict(BaseModel):
    """Where the failure comes from and which nodes are suspect.

    ``source`` names who decided (``builtin`` rules or the external service URL);
    ``fallback_reason`` is set when the external service failed and the built-in
    verdict was used instead. ``lemon_nodes`` are suspects with a lemon record.
    """

    model_config = ConfigDict(frozen=True)

    attribution: vocab.Attribution
    category: vocab.Category
    suspect_nodes: list[str] = Field(default_factory=list)
    suspect_ranks: list[int] = Field(default_factory=list)
    confidence: float = Field(default=0.5, ge=0.0, le=1.0)
    source: str = "builtin"
    reasons: list[str] = Field(default_factory=list)
    fallback_reason: str | None = None
    lemon_nodes: list[str] = Field(default_factory=list)
    """Suspects that are also lemons (implicated again and again across jobs); the policy may drain them."""
    outside_allocation: list[str] = Field(default_factory=list)
    """Host names the evidence gives that no attempt of the workload was placed on (a forged,
    copied or misparsed line): kept as evidence text, never suspects, excluded, drained or remembered."""
    sources: list[evidence.SourceStatus] = Field(default_factory=list)
    """Evidence sources consulted for this verdict (the job's log, GPU metrics, the scheduler's node
    state) and, for each one that was unavailable, why: a verdict reached without them says so."""
    node_evidence: list[evidence.Finding] = Field(default_factory=list)
    """What those sources reported about the workload's nodes during the attempt."""
