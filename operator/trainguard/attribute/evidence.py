"""Node evidence in attribution: GPU metrics and scheduler node state weigh in on a verdict.

Place in the loop: after the built-in rules (``attribute.rules``) and before the external service,
so the service sees the stronger verdict and the allocation check still runs last.

Why: the job's own output often shows only the symptom (``CUDA error: unknown error``, a segfault,
an NCCL error) while DCGM saw the cause (an Xid 79, an uncorrectable ECC error on a GPU of
node2) or a node health check drained the node. A fault on a node of the workload's allocation
during the attempt makes the verdict ``hardware`` with that node as the suspect, unless the
program itself failed (out of memory, a Python exception): then a retry elsewhere fails the same
way and the finding is only recorded. Pure: the engine gathers the evidence.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from trainguard.model import evidence, verdicts, vocab, workloads

C = vocab.Category
A = vocab.Attribution

LOG_SOURCE = "log"
NODE_STATE = "node_state"
"""``Finding.signal`` of scheduler node-state findings."""
NODE_CONDITION = "node_condition"
"""``Finding.signal`` of Kubernetes Node conditions and taints (``k8s/node_conditions.py``): weighed like
node state (its words decide hardware or system), not like a GPU-metric fault."""
NODE_SIGNALS = frozenset({NODE_STATE, NODE_CONDITION})

PROGRAM_FAILED = frozenset({C.OOM_GPU, C.OOM_HOST_KILLED, C.PYTHON_EXCEPTION, C.DATALOADER_KILLED})
"""The program asked for too much or raised: node evidence does not change that verdict."""

CONFIDENCE_METRIC_FAULT = 0.85
CONFIDENCE_NODE_STATE = 0.6
CONFIDENCE_CAP = 0.95
CORROBORATION_BONUS = 0.05

HARDWARE_WORDS = re.compile(r"gpu|xid|ecc|nvlink|nvidia|dcgm|nvml|hardware|row.?remap|pcie", re.IGNORECASE)
"""A node-state reason with these words was set for the hardware (health checks name the GPU)."""
SCHEDULER_REASONS = re.compile(
    r"^\s*(not responding|kill task failed|prolog error|epilog error|node unexpectedly rebooted|"
    r"batch job complete failure|low realmemory|low socket|low tmpdisk|gres/gpu count|no network address)",
    re.IGNORECASE)
"""Reasons the scheduler sets itself when a node misbehaves (Slurm's own words): evidence about the node.
Any other reason not ours is a person's words (an administrator's "maintenance", "PSU swap"): their
decision about the node, shown as context, never taken as a fault that makes the node a suspect."""


def apply(
    verdict: verdicts.Verdict,
    node_evidence: evidence.NodeEvidence,
    allocation: Collection[str] | None = None,
) -> verdicts.Verdict:
    """``verdict`` with the node evidence weighed in, its sources and findings recorded.

    Only findings on nodes of ``allocation`` (when given) count: evidence about other nodes is
    never a reason to exclude or drain anything of this workload.
    """
    sources = [evidence.SourceStatus(name=LOG_SOURCE, state=evidence.SourceState.USED), *node_evidence.sources]
    findings = [f for f in node_evidence.findings if allocation is None or f.node in allocation]
    reasons = list(verdict.reasons)
    for source in node_evidence.sources:
        if source.state == evidence.SourceState.UNAVAILABLE:
            reasons.append(f"{source.name} unavailable: {source.reason}")
    update: dict[str, object] = {"sources": sources, "node_evidence": findings, "reasons": reasons}

    faults = [f for f in findings if f.fault]
    context = [f for f in findings if not f.fault]
    if context:
        reasons.append("context: " + "; ".join(f.text for f in context[:4]) + (" ..." if len(context) > 4 else ""))
    if not faults or verdict.attribution == A.NONE:
        return verdict.model_copy(update=update)

    fault_nodes = list(dict.fromkeys(f.node for f in faults))
    described = "; ".join(f.text for f in faults[:4])
    if verdict.category in PROGRAM_FAILED or (verdict.attribution == A.APPLICATION and not _metric(faults)):
        reasons.append(f"node evidence ({described}) recorded, but {verdict.category} is the program's own "
                       "failure: the verdict stays")
        return verdict.model_copy(update=update)
    if verdict.attribution == A.HARDWARE:
        suspects = list(dict.fromkeys([*verdict.suspect_nodes, *fault_nodes]))
        reasons.append(f"node evidence corroborates hardware: {described}")
        update |= {"suspect_nodes": suspects,
                   "confidence": round(min(CONFIDENCE_CAP, verdict.confidence + CORROBORATION_BONUS), 3)}
        return verdict.model_copy(update=update)

    metric = _metric(faults)
    if metric:
        attribution, confidence = A.HARDWARE, CONFIDENCE_METRIC_FAULT
        category = next((f.category for f in metric if f.category != C.NONE), verdict.category)
    else:
        hardware = any(HARDWARE_WORDS.search(f.text) for f in faults)
        attribution = A.HARDWARE if hardware else A.SYSTEM
        confidence, category = CONFIDENCE_NODE_STATE, verdict.category
    before = f"{verdict.attribution} ({verdict.category})"
    was = f"; the log named {', '.join(verdict.suspect_nodes)}" if verdict.suspect_nodes else ""
    reasons.append(f"{before} in the log, and during the attempt {described}: {attribution}, suspect "
                   f"{', '.join(fault_nodes)}{was}")
    update |= {"attribution": attribution, "category": category, "suspect_nodes": fault_nodes,
               "confidence": max(confidence, verdict.confidence) if verdict.attribution == attribution else confidence}
    return verdict.model_copy(update=update)


def _metric(faults: list[evidence.Finding]) -> list[evidence.Finding]:
    """Faults from GPU telemetry (as opposed to the scheduler's node state or a Node's conditions)."""
    return [f for f in faults if f.signal not in NODE_SIGNALS]


def node_state_findings(nodes: Collection[str], snapshots: Sequence[workloads.NodeSnapshot], *, source: str,
                        our_prefix: str) -> list[evidence.Finding]:
    """Findings for the workload's ``nodes`` that the scheduler keeps work off (drained, failed, down)
    for a reason someone else set (a health check, an administrator): our own drains are our effect.

    A finding is a fault (evidence against the node) only when the scheduler set the reason itself
    (``SCHEDULER_REASONS``) or a health check names the hardware (``HARDWARE_WORDS``); a person's own
    reason is context: whose node it is to judge is theirs, and their words are no diagnosis."""
    out: list[evidence.Finding] = []
    for snap in snapshots:
        if snap.name not in nodes or snap.usable:
            continue
        if snap.reason.startswith(our_prefix):
            continue
        why = f": {snap.reason}" if snap.reason else " (no reason given)"
        out.append(evidence.Finding(
            source=source, node=snap.name, signal=NODE_STATE, category=C.NONE,
            fault=bool(HARDWARE_WORDS.search(snap.reason) or SCHEDULER_REASONS.search(snap.reason)),
            text=f"{snap.name} is {snap.state} in the scheduler{why}",
        ))
    return out
