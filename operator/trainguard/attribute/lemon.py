"""Lemon-node memory: which nodes were implicated in failures, across jobs, and when.

Place in the loop: ``attribute.rules`` reads a ``NodeHistory`` to raise its confidence in a
suspect that keeps failing jobs and to name it even when the evidence alone cannot; the store
records each verdict's suspects (``AuditStore.record_verdict``: only nodes the workload was
placed on, one row per node and (workload, attempt)) and the engine reads them back into a
``NodeHistory``. Peers converge on this (Meta's lemon-node detection, nvrx-watch
``suspect_node``, Lablup: a few nodes cause most exclusions).

An implication is counted once per incident, i.e. per (workload, attempt): a cascade in which
every rank of one attempt names the same node, or a second anomaly of the same attempt, is one
incident, not many (NVRx: "same-attempt repeats across ranks are not recurrence"). Pure code:
callers pass the time.
"""

from __future__ import annotations

from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from trainguard.model import vocab

MAX_PER_NODE = 256
"""Implications kept per node; older ones are dropped first. Bounds memory for a flapping node."""


class LemonRule(NamedTuple):
    """The policy's lemon setting, handed down by the engine (attribute does not import policy)."""

    threshold: int
    window_s: float


class Implication(BaseModel):
    """Node ``node`` was a suspect of attempt ``attempt`` of ``workload`` at ``at`` (epoch seconds)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node: str
    at: float
    workload: str
    attempt: int = 0
    category: vocab.Category = vocab.Category.NONE


class NodeHistory(BaseModel):
    """All remembered implications, oldest first."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    implications: list[Implication] = Field(default_factory=list)

    def incidents(self, node: str, *, now: float, window_s: float, exclude: tuple[str, int] | None = None) -> int:
        """Distinct (workload, attempt) incidents naming ``node`` in ``(now - window_s, now]``."""
        keys = {
            (item.workload, item.attempt)
            for item in self.implications
            if item.node == node and now - window_s < item.at <= now
        }
        if exclude is not None:
            keys.discard(exclude)
        return len(keys)

    def workloads(self, node: str, *, now: float, window_s: float) -> int:
        """Distinct workloads that implicated ``node`` in the window (for reasons: "across N jobs")."""
        return len(
            {item.workload for item in self.implications if item.node == node and now - window_s < item.at <= now}
        )


def record(
    history: NodeHistory,
    nodes: list[str],
    *,
    at: float,
    workload: str,
    attempt: int,
    category: vocab.Category,
    retention_s: float,
) -> NodeHistory:
    """``history`` plus one implication per node; entries older than ``retention_s`` are dropped."""
    kept = [item for item in history.implications if at - retention_s < item.at]
    known = {(item.node, item.workload, item.attempt) for item in kept}
    for node in dict.fromkeys(nodes):
        if (node, workload, attempt) not in known:
            kept.append(Implication(node=node, at=at, workload=workload, attempt=attempt, category=category))
    kept.sort(key=lambda item: item.at)
    per_node: dict[str, int] = {}
    bounded: list[Implication] = []
    for item in reversed(kept):
        per_node[item.node] = per_node.get(item.node, 0) + 1
        if per_node[item.node] <= MAX_PER_NODE:
            bounded.append(item)
    bounded.reverse()
    return NodeHistory(implications=bounded)
