"""Node evidence: what telemetry outside the job's own output says about the job's nodes.

The strongest hardware evidence (Xid, ECC, row-remap failures, NVLink errors, a node health
check draining the node) is often absent from the job's output: DCGM publishes it to
Prometheus, a health check writes it into the scheduler's node state. ``signals.gpu_metrics``
and the engine's node-state read produce these values; ``attribute.evidence`` weighs them.
Every verdict lists the sources it consulted and why any of them was unavailable, because a
verdict reached without the metrics must say so.
"""

from __future__ import annotations

import enum

from pydantic import BaseModel, ConfigDict, Field

from trainguard.model import vocab

METRIC_FAULT_PATTERN = "gpu_metrics.fault"
"""``Evidence.pattern`` of an anomaly raised by a hardware fault in the GPU metrics while the job
runs (its log may be silent): the policy's ``detection.gpuMetricAction`` decides what it gets."""


class SourceState(enum.StrEnum):
    USED = "used"
    UNAVAILABLE = "unavailable"
    NOT_CONFIGURED = "not_configured"


class SourceStatus(BaseModel):
    """One evidence source as consulted for one verdict (``reason`` says why it was unavailable,
    or what it lacked, e.g. nodes without DCGM series)."""

    model_config = ConfigDict(frozen=True)

    name: str
    state: SourceState
    reason: str = ""


class Finding(BaseModel):
    """One observation about one node during an attempt.

    ``fault`` marks findings strong enough to call the failure hardware on their own (a hardware
    Xid, an uncorrectable ECC error, a row-remap failure, NVLink recovery errors, a node drained
    by a health check); the others (correctable ECC, CRC/replay counters, throttling) are context.
    ``value`` is the counter's increase over the window, the Xid number or the bitmask.
    """

    model_config = ConfigDict(frozen=True)

    source: str
    node: str
    signal: str
    category: vocab.Category
    fault: bool
    text: str
    value: float = 0.0
    gpu: int | None = None
    at: float | None = None

    @property
    def key(self) -> tuple[str, str, int | None, float]:
        """Identity for "already reported": the same increase or Xid is not an anomaly twice."""
        return (self.node, self.signal, self.gpu, self.value)


class NodeEvidence(BaseModel):
    """Findings over an attempt's window and the state of every source consulted."""

    model_config = ConfigDict(frozen=True)

    findings: list[Finding] = Field(default_factory=list)
    sources: list[SourceStatus] = Field(default_factory=list)

    def faults(self) -> list[Finding]:
        return [f for f in self.findings if f.fault]
