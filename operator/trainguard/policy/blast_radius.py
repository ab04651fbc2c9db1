"""Blast-radius limits: the last check before an Advice may change the scheduler.

Place in the loop: after ``policy.decide`` and before the executor. The engine passes the
operations carried out in the last hour across all workloads and the drain state of the
partition; a non-None answer is the reason the advice is blocked, recorded in the audit log.
Comparable tools have such breakers too (NVSentinel 50 %/5 min, GCM <= 3 actions/h, NHC minHealthy):
a wrong verdict repeated by a machine must not empty a cluster.

Counted operations: one for the advice's action (requeue, hold, stop; exclusions ride on the
requeue) plus one per node to drain. The check applies in Monitor mode too, so the recorded
advice says whether Action mode would have been blocked. Pure: the caller passes ``now``.
"""

from __future__ import annotations

from collections.abc import Sequence

from trainguard.model import advice as advice_model
from trainguard.model import vocab
from trainguard.policy import model

WINDOW_S = 3600.0
"""``maxActionsPerHour`` counts operations in a rolling window of this many seconds."""


def planned_operations(advice: advice_model.Advice) -> int:
    """How many scheduler operations ``advice`` needs."""
    return (0 if advice.action == vocab.AdviceAction.NONE else 1) + len(advice.drain_nodes)


def check(
    spec: model.RecoveryPolicySpec,
    *,
    advice: advice_model.Advice,
    recent_actions: Sequence[tuple[float, str]],
    partition_nodes: int,
    drained_by_us: int,
    now: float,
) -> str | None:
    """None if ``advice`` may be carried out, else the blocking reason.

    ``recent_actions`` are (epoch seconds, operation) pairs across all workloads; entries
    outside ``(now - 1 h, now]`` are ignored. ``drained_by_us`` counts the partition's nodes
    currently drained with our reason tag, ``partition_nodes`` all its nodes.
    """
    planned = planned_operations(advice)
    if planned == 0:
        return None
    limits = spec.blast_radius
    done = sum(1 for at, _ in recent_actions if now - WINDOW_S < at <= now)
    if done + planned > limits.max_actions_per_hour:
        return (
            f"blast radius: {done} operations in the last hour + {planned} planned > maxActionsPerHour "
            f"{limits.max_actions_per_hour}"
        )
    if advice.drain_nodes:
        if partition_nodes <= 0:
            return "blast radius: partition size unknown, no node may be drained"
        drained = drained_by_us + len(advice.drain_nodes)
        share = drained / partition_nodes
        if share > limits.max_drained_share:
            return (
                f"blast radius: draining {', '.join(advice.drain_nodes)} would put {drained} of {partition_nodes} "
                f"nodes ({share:.0%}) in our drain > maxDrainedShare {limits.max_drained_share:.0%}"
            )
    return None
