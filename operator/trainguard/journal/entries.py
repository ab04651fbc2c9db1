"""The signal journal's entries: the compact stream each decision was made from.

A decision of the engine is a pure function of what it was given (``attribute.rules.attribute``,
``attribute.evidence.apply``, ``policy.decide.decide`` take the clock and every input as
arguments). An entry holds exactly those inputs, so replaying it needs nothing but the entry and a
policy:

- ``verdict``: one attribution: the anomaly (with its evidence: the matched lines with their pattern
  ids, or the GPU-metric faults), the lemon-node memory it read, the attempt's allocation, the node
  evidence (GPU metrics, the scheduler's node state: sources used or unavailable), the clock, the
  effective policy, and the verdict it produced;
- ``advice``: one decision: the attribution above, the scheduler's snapshot read before deciding,
  the workload's policy ledger, the generation, usable partition nodes, our own exclusions, the
  allocation, the route, the clock, and the advice it produced;
- ``snapshot``: the scheduler's snapshot of the job at each change of state, attempt or placement;
- ``checkpoint``: a checkpoint line of the policy's ``checkpointRegex`` (thinned: one per attempt per
  ``recorder.CHECKPOINT_EVERY_S``);
- ``progress``: a progress line the detector parsed (iteration, rate), thinned likewise
  (``recorder.PROGRESS_EVERY_S``): with checkpoints, what goodput accounting reasons about.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from trainguard.attribute import lemon
from trainguard.model import advice, anomalies, routing, verdicts, workloads
from trainguard.model import evidence as evidence_model
from trainguard.policy import ledger

VERDICT = "verdict"
ADVICE = "advice"
SNAPSHOT = "snapshot"
CHECKPOINT = "checkpoint"
PROGRESS = "progress"


class Attribution(BaseModel):
    """The inputs and the result of one attribution (``engine.decision.Decision.attribute``)."""

    model_config = ConfigDict(frozen=True)

    workload: str
    attempt: int
    at: float
    """The clock at attribution: lemon windows count back from it."""
    policy: str
    spec: dict[str, Any]
    """The effective policy (selected policy + overrides + mode), as ``model_dump(mode="json")``."""
    anomaly: anomalies.Anomaly
    implications: list[lemon.Implication] = Field(default_factory=list)
    allocation: list[str] = Field(default_factory=list)
    job_nodes: list[str] = Field(default_factory=list)
    node_evidence: evidence_model.NodeEvidence
    external: bool = False
    """An external attribution service had the last word: replay keeps its recorded verdict."""
    verdict: verdicts.Verdict


class VerdictEntry(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: Literal["verdict"] = "verdict"
    attribution: Attribution


class AdviceEntry(BaseModel):
    """The inputs and the result of one decision (``engine.decision.Decision.decide``)."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["advice"] = "advice"
    at: float
    attribution: Attribution
    job: workloads.JobSnapshot
    history: ledger.WorkloadHistory
    generation: int
    partition_nodes: int | None = None
    own_exclusions: list[str] = Field(default_factory=list)
    node_actions: list[str] = Field(default_factory=lambda: ["drainNode"])
    """The installation's ways to take a node out of service (``schedulers.base.node_actions``)."""
    allocation: list[str] = Field(default_factory=list)
    route: routing.Route | None = None
    advice: advice.Advice


class SnapshotEntry(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: Literal["snapshot"] = "snapshot"
    job: workloads.JobSnapshot


class ProgressEntry(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: Literal["progress"] = "progress"
    sample: anomalies.Evidence


class CheckpointEntry(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: Literal["checkpoint"] = "checkpoint"
    at: float
