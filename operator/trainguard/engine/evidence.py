"""Node evidence: what GPU metrics, the scheduler's node state and further sources say about an
attempt's nodes.

Place: a step module of the engine, asked by the decision for every verdict
(``attribute.evidence`` weighs it) and by the metrics round, which raises a hardware fault in the
GPU metrics as an anomaly of its own (``metric_anomaly``). Evidence only: a source that fails is
recorded as unavailable, never raised, so an outage cannot stop attribution.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence

from trainguard.attribute import evidence as node_evidence
from trainguard.engine import runtime
from trainguard.model import anomalies, vocab
from trainguard.model import evidence as evidence_model
from trainguard.schedulers import base
from trainguard.signals import gpu_metrics, sources
from trainguard.store import audit


class NodeEvidence:
    """The evidence sources of one engine."""

    def __init__(self, scheduler: base.Scheduler, store: audit.AuditStore, *,
                 gpu_metrics_: gpu_metrics.GpuMetrics | None, node_sources: Sequence[sources.NodeSource]) -> None:
        self.scheduler = scheduler
        self.store = store
        self.gpu_metrics = gpu_metrics_
        """DCGM evidence from Prometheus/VictoriaMetrics (``--prometheus-url``); None: not configured."""
        self.node_sources = list(node_sources)
        """Further node evidence (e.g. Kubernetes Node conditions), asked beside the GPU metrics for every verdict."""

    async def window(self, rt: runtime.WorkloadRuntime, attempt: int, now: float) -> evidence_model.NodeEvidence:
        """What GPU metrics and the scheduler's node state say about the attempt's nodes, over the
        attempt's window (its start to now); each source answers or says why it cannot."""
        job = rt.job
        nodes = list(job.nodes) if job.attempt == attempt else []
        if not nodes:
            nodes = sorted(await self.store.allocation(rt.workload))
        start = job.started_at if job.attempt == attempt and job.started_at else None
        metrics: Awaitable[evidence_model.NodeEvidence]
        if self.gpu_metrics is None:
            metrics = _ready(_source(gpu_metrics.SOURCE, evidence_model.SourceState.NOT_CONFIGURED,
                                     "no --prometheus-url"))
        elif start is None:
            metrics = _ready(_source(gpu_metrics.SOURCE, evidence_model.SourceState.UNAVAILABLE,
                                     f"the scheduler gives no start time for attempt {attempt}"))
        else:
            metrics = self.gpu_metrics.window(nodes, start, now)
        parts = await asyncio.gather(metrics, self.node_state(nodes),
                                     *(_node_source(s, nodes, start, now) for s in self.node_sources))
        return evidence_model.NodeEvidence(findings=[f for p in parts for f in p.findings],
                                           sources=[s for p in parts for s in p.sources])

    async def node_state(self, nodes: Sequence[str]) -> evidence_model.NodeEvidence:
        """The scheduler's view of ``nodes``: drained, failed or down for someone else's reason."""
        name = f"{self.scheduler.name}-nodes"
        try:
            snapshots = await self.scheduler.list_nodes()
        except Exception as exc:  # evidence only: an outage must not stop attribution
            return _source(name, evidence_model.SourceState.UNAVAILABLE, f"{type(exc).__name__}: {exc}")
        findings = node_evidence.node_state_findings(nodes, snapshots, source=name,
                                                     our_prefix=base.OUR_REASON_PREFIX)
        return _source(name, evidence_model.SourceState.USED, findings=findings)


def metric_anomaly(faults: Sequence[evidence_model.Finding], now: float) -> anomalies.Anomaly:
    """An anomaly from hardware faults in the GPU metrics (no log line): evidence per fault."""
    items = [
        anomalies.Evidence(line=0, text=f.text, pattern=evidence_model.METRIC_FAULT_PATTERN, source=f.source, at=f.at,
                           node=f.node, gpu=f.gpu, xid=int(f.value) if f.signal == gpu_metrics.XID else None,
                           category=f.category, severity=vocab.Severity.FATAL)
        for f in faults
    ]
    first = faults[0]
    return anomalies.Anomaly(
        symptom=vocab.Symptom.CRASH, category=first.category if first.category != vocab.Category.NONE
        else vocab.Category.GPU_XID_HARDWARE, attribution_hint=vocab.Attribution.HARDWARE, evidence=items,
        suspect_nodes=list(dict.fromkeys(f.node for f in faults)), first_seen_at=first.at or now, detected_at=now,
        summary="hardware fault in the GPU metrics of a running job: " + "; ".join(f.text for f in faults[:3]),
    )


def _source(name: str, state: evidence_model.SourceState, reason: str = "", *,
            findings: Sequence[evidence_model.Finding] = ()) -> evidence_model.NodeEvidence:
    return evidence_model.NodeEvidence(findings=list(findings),
                                       sources=[evidence_model.SourceStatus(name=name, state=state, reason=reason)])


async def _node_source(source: sources.NodeSource, nodes: Sequence[str], start: float | None,
                       now: float) -> evidence_model.NodeEvidence:
    """One further node-evidence source; one that fails is recorded as unavailable, never raised."""
    try:
        return await source.window(nodes, start, now)
    except Exception as exc:  # evidence only: an outage must not stop attribution
        return _source(source.name, evidence_model.SourceState.UNAVAILABLE, f"{type(exc).__name__}: {exc}")


async def _ready(value: evidence_model.NodeEvidence) -> evidence_model.NodeEvidence:
    return value
