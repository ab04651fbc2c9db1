"""Node conditions and taints as node evidence (``signals.sources.NodeSource``).

Place: the kopf shell (``k8s/``): it reads Node objects; the engine asks it, beside the GPU metrics
and the scheduler's node state, what it knows about the nodes of an attempt when a verdict is made
(``attribute.evidence`` weighs the findings).

Why: when a pod dies, its log often shows only the symptom (a lost NCCL peer, a killed process)
while the Node says what happened: the kubelet stopped posting status (``Ready`` False/Unknown),
node-problem-detector set a condition (``GPUProblem``, ``XidError``, ``KernelDeadlock``,
``ReadonlyFilesystem``: by its convention ``True`` means the problem is present), or a health
checker tainted the node (e.g. ``nvidia.com/gpu.health=unhealthy:NoSchedule``).

What counts (``findings``):
- ``Ready`` not ``True``: a fault (the node stopped working), with the condition's reason and message;
- any other condition that is ``True``, except the kubelet's pressure conditions: a fault;
  ``MemoryPressure``/``DiskPressure``/``PIDPressure`` are context (they evict, they do not break);
- a ``NoSchedule``/``NoExecute`` taint someone else set: a fault, except the taints the node
  lifecycle controller derives from the conditions above (``node.kubernetes.io/not-ready``,
  ``unreachable``: the condition already says it) and the cordon taint
  (``node.kubernetes.io/unschedulable``: who cordoned is not recorded on the node), which are
  context; our own taints (key under ``OUR_TAINT_PREFIX``) are our effect, never evidence;
- a node name without a Node object: context (a deleted Node and a name that is not a Kubernetes
  node look alike).
Every finding is about a node of the attempt only; the words of a finding decide hardware or system
(``attribute.evidence.HARDWARE_WORDS``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import kubernetes_asyncio.client

from trainguard.attribute.evidence import NODE_CONDITION
from trainguard.k8s.pods import NS, parse_time_ns
from trainguard.model import evidence, vocab

logger = logging.getLogger(__name__)

SOURCE = "kubernetes-node-conditions"
OUR_TAINT_PREFIX = "trainguard.dev/"
"""Taint keys we set ourselves (excluding a suspect node): our effect, not evidence."""

PRESSURE = frozenset({"MemoryPressure", "DiskPressure", "PIDPressure"})
LIFECYCLE_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable",
                              "node.kubernetes.io/unschedulable"})
C = vocab.Category


def _category(words: str) -> vocab.Category:
    """A hardware category a condition or taint names, else ``none`` (the verdict's category stays)."""
    low = words.lower()
    if "xid" in low:
        return C.GPU_XID_HARDWARE
    if "ecc" in low or "row remap" in low or "rowremap" in low:
        return C.ECC_MEMORY
    if "nvlink" in low:
        return C.NVLINK
    if "fallen off" in low or "gpulost" in low or "gpu lost" in low:
        return C.GPU_FALLEN_OFF_BUS
    return C.NONE


def _finding(node: str, text: str, *, fault: bool, at: float | None = None) -> evidence.Finding:
    return evidence.Finding(source=SOURCE, node=node, signal=NODE_CONDITION, category=_category(text), fault=fault,
                            text=text, at=at)


def _since(condition: Mapping[str, Any]) -> float | None:
    ns = parse_time_ns(condition.get("lastTransitionTime"))
    return ns / NS if ns is not None else None


def node_findings(node: str, body: Mapping[str, Any] | None, *, our_prefix: str = OUR_TAINT_PREFIX
                  ) -> list[evidence.Finding]:
    """What one Node object (its JSON; None = it does not exist) says against the node."""
    if body is None:
        # context only: a deleted Node and a name that was never a Kubernetes node look the same here
        return [_finding(node, f"{node} is not a Node in Kubernetes (deleted, or not a Kubernetes node name)",
                         fault=False)]
    out: list[evidence.Finding] = []
    for cond in (body.get("status") or {}).get("conditions") or []:
        kind, status = str(cond.get("type", "")), str(cond.get("status", ""))
        why = " ".join(p for p in (str(cond.get("reason") or ""), str(cond.get("message") or "")) if p)
        detail = f": {why}" if why else ""
        if kind == "Ready":
            if status != "True":
                out.append(_finding(node, f"{node} is NotReady (Ready={status}){detail}", fault=True, at=_since(cond)))
        elif status == "True":
            out.append(_finding(node, f"{node} has condition {kind}=True{detail}", fault=kind not in PRESSURE,
                                at=_since(cond)))
    for taint in (body.get("spec") or {}).get("taints") or []:
        key, effect = str(taint.get("key", "")), str(taint.get("effect", ""))
        if key.startswith(our_prefix):
            continue
        value = f"={taint['value']}" if taint.get("value") else ""
        strong = effect in ("NoSchedule", "NoExecute") and key not in LIFECYCLE_TAINTS
        out.append(_finding(node, f"{node} is tainted {key}{value}:{effect}", fault=strong))
    if (body.get("spec") or {}).get("unschedulable") and not any(
            str(t.get("key", "")) == "node.kubernetes.io/unschedulable" for t in (body.get("spec") or {}).get("taints")
            or []):
        out.append(_finding(node, f"{node} is cordoned", fault=False))
    return out


def findings(nodes: Collection[str], bodies: Iterable[Mapping[str, Any]], *, our_prefix: str = OUR_TAINT_PREFIX
             ) -> list[evidence.Finding]:
    """Findings for each of ``nodes`` from the listed Node objects."""
    by_name = {str((b.get("metadata") or {}).get("name", "")): b for b in bodies}
    return [f for n in sorted(set(nodes)) for f in node_findings(n, by_name.get(n), our_prefix=our_prefix)]


class NodeConditions:
    """The Node objects of an attempt's nodes, read when a verdict is made (``signals.sources.NodeSource``).

    The conditions and taints are the nodes' state now, not a history over the attempt's window: the
    verdict is made right after the failure, while the state it left is still there.
    """

    name = SOURCE

    def __init__(self, api: kubernetes_asyncio.client.ApiClient, *, our_prefix: str = OUR_TAINT_PREFIX,
                 timeout_s: float = 10.0) -> None:
        self.api = api
        self.core = kubernetes_asyncio.client.CoreV1Api(api)
        self.our_prefix = our_prefix
        self.timeout_s = timeout_s

    async def window(self, nodes: Sequence[str], start: float | None, now: float) -> evidence.NodeEvidence:
        del start, now  # the state now (see the class docstring)
        if not nodes:
            return evidence.NodeEvidence(sources=[evidence.SourceStatus(
                name=SOURCE, state=evidence.SourceState.UNAVAILABLE, reason="the attempt has no nodes")])
        try:
            listed = await asyncio.wait_for(self.core.list_node(), timeout=self.timeout_s)
        except Exception as exc:  # evidence only: an outage must not stop attribution
            return evidence.NodeEvidence(sources=[evidence.SourceStatus(
                name=SOURCE, state=evidence.SourceState.UNAVAILABLE, reason=f"{type(exc).__name__}: {exc}"[:300])])
        bodies = [self.api.sanitize_for_serialization(n) for n in listed.items]
        return evidence.NodeEvidence(findings=findings(nodes, bodies, our_prefix=self.our_prefix),
                                     sources=[evidence.SourceStatus(name=SOURCE, state=evidence.SourceState.USED)])
