"""Blast-radius limits: the last check before an Advice may change the scheduler.

Place in the loop: after ``policy.decide`` and before the executor. The engine passes the
operations counted in the last hour, the cluster's nodes and which of them we drained; the
answer is a ``model.limits.LimitReport`` with every limit's figures and whether it would block.
A wrong verdict repeated by a machine must not empty a cluster, so peers converge on such
breakers (NVSentinel 50 %/5 min, GCM <= 3 actions/h, NHC minHealthy).

Counted operations: one for the advice's action (requeue, hold, stop; exclusions ride on the
requeue) plus one per node to drain. The evaluation runs in both modes: in Action mode a
blocking report stops the advice; in Monitor mode it is recorded, so the audit shows what
Action mode would have refused. Pure: the caller passes ``now``.

``maxDrainedShare`` is per partition: draining a node takes it out of every partition it
belongs to, so each of those partitions is checked against its own size (all its nodes,
whatever their state), counting its nodes drained by us now plus the ones planned.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from trainguard.model import advice as advice_model
from trainguard.model import limits, vocab, workloads
from trainguard.policy import model

WINDOW_S = 3600.0
"""``maxActionsPerHour`` counts operations in a rolling window of this many seconds."""


def planned_operations(advice: advice_model.Advice) -> int:
    """How many scheduler operations ``advice`` needs."""
    return (0 if advice.action == vocab.AdviceAction.NONE else 1) + len(advice.drain_nodes)


def evaluate(
    spec: model.RecoveryPolicySpec,
    *,
    advice: advice_model.Advice,
    recent_actions: Sequence[tuple[float, str]],
    nodes: Sequence[workloads.NodeSnapshot],
    drained_by_us: Collection[str],
    now: float,
    counted: str = "",
) -> limits.LimitReport:
    """Every limit against ``advice``; ``report.reason`` is None when all allow it.

    ``recent_actions`` are (epoch seconds, operation) pairs; entries outside ``(now - 1 h, now]``
    are ignored. ``nodes`` is the cluster's node list, ``drained_by_us`` the names of those
    drained with our reason tag. ``counted`` says which history ``recent_actions`` holds.
    """
    planned = planned_operations(advice)
    if planned == 0:
        return limits.LimitReport(counted=counted)
    checks = [_actions_per_hour(spec, planned, recent_actions, now)]
    if advice.drain_nodes:
        checks.extend(_drained_share(spec, advice.drain_nodes, nodes, drained_by_us))
    return limits.LimitReport(checks=checks, counted=counted)


def actions_per_hour(
    spec: model.RecoveryPolicySpec, advice: advice_model.Advice, recent_actions: Sequence[tuple[float, str]],
    now: float,
) -> limits.LimitCheck | None:
    """Only the ``maxActionsPerHour`` check of ``advice`` (None: it plans no operation). For a backtest
    that knows the operations of the past but not the cluster's node list at the time."""
    planned = planned_operations(advice)
    return _actions_per_hour(spec, planned, recent_actions, now) if planned else None


def _actions_per_hour(
    spec: model.RecoveryPolicySpec, planned: int, recent_actions: Sequence[tuple[float, str]], now: float
) -> limits.LimitCheck:
    maximum = spec.blast_radius.max_actions_per_hour
    done = sum(1 for at, _ in recent_actions if now - WINDOW_S < at <= now)
    blocked = done + planned > maximum
    reason = (
        f"blast radius: {done} operations in the last hour + {planned} planned > maxActionsPerHour {maximum}"
        if blocked else ""
    )
    return limits.LimitCheck(limit=limits.ACTIONS_PER_HOUR, maximum=maximum, planned=planned, in_window=done,
                             would_block=blocked, reason=reason)


def _drained_share(
    spec: model.RecoveryPolicySpec,
    drain: Sequence[str],
    nodes: Sequence[workloads.NodeSnapshot],
    drained_by_us: Collection[str],
) -> list[limits.LimitCheck]:
    maximum = spec.blast_radius.max_drained_share
    by_name = {n.name: n for n in nodes}
    unplaced = sorted(n for n in set(drain) if n not in by_name or not by_name[n].partitions)
    if unplaced:
        # No partition, no denominator: refuse rather than guess a share.
        return [limits.LimitCheck(
            limit=limits.DRAINED_SHARE, maximum=maximum, planned=len(set(drain)), would_block=True,
            reason=f"blast radius: partition of {', '.join(unplaced)} unknown, no node may be drained",
        )]
    partitions = sorted({p for name in set(drain) for p in by_name[name].partitions})
    checks: list[limits.LimitCheck] = []
    for partition in partitions:
        members = {n.name for n in nodes if partition in n.partitions}
        ours = {name for name in drained_by_us if name in members}
        fresh = sorted(name for name in set(drain) if name in members and name not in ours)
        drained = len(ours) + len(fresh)
        share = drained / len(members)
        blocked = share > maximum
        reason = (
            f"blast radius: draining {', '.join(fresh)} would put {drained} of {len(members)} nodes of partition "
            f"{partition} ({share:.0%}) in our drain > maxDrainedShare {maximum:.0%}"
            if blocked else ""
        )
        checks.append(limits.LimitCheck(
            limit=limits.DRAINED_SHARE, maximum=maximum, planned=len(fresh), partition=partition,
            partition_nodes=len(members), drained_by_us=len(ours), share=round(share, 4), would_block=blocked,
            reason=reason,
        ))
    return checks
