"""Blast-radius limits: the last check before an Advice may change the scheduler.

Place in the loop: after ``policy.decide`` and before the executor. The engine passes the
operations counted in the last hour, the cluster's nodes and which of them we drained; the
answer is a ``model.limits.LimitReport`` with every limit's figures and whether it would block.
A wrong verdict repeated by a machine must not empty a cluster, so peers converge on such
breakers (NVSentinel 50 %/5 min, GCM <= 3 actions/h, NHC minHealthy).

Counted operations: one for the advice's action (requeue, hold, stop; exclusions ride on the
requeue) plus one per node to drain. A policy's ``maxDrainedShare`` counts its drains; the
administrator's caps on nodes out of service count, on Kubernetes, the exclusions too (each is a
cordon plus a taint of the node for every workload: ``Advice.nodes_taken_out``). Kubernetes node
pools (a node label) stand in for partitions. A Kubernetes advice whose exclusions a cap refuses
is refused whole and opens the breaker (its workload's own failure policy restarts it).

The evaluation runs in both modes: in Action mode a
blocking report stops the advice; in Monitor mode it is recorded, so the audit shows what
Action mode would have refused. Pure: the caller passes ``now``.

``maxDrainedShare`` is per partition: draining a node takes it out of every partition it
belongs to, so each of those partitions is checked against its own size (all its nodes,
whatever their state), counting its nodes drained by us now plus the ones planned.

Above every policy, the cluster administrator's caps (``limits.AdminCaps``, process settings): the
same actions-per-hour window against the cap, and the nodes out of service by us at once (absolute,
and as a share of the cluster and of each partition). A policy can only be stricter. A cap that
blocks is marked ``cap``: the executor then opens the latched breaker (``act.switch``).

Degrade, don't abandon (``decide``): when the whole advice is refused by a policy's limit but the
advice without its drains is allowed, the rest (the requeue with its exclusions) is carried out and
the refused drains are recorded. A cap that blocks never degrades: it opens the breaker.
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
    caps: limits.AdminCaps | None = None,
) -> limits.LimitReport:
    """Every limit against ``advice``; ``report.reason`` is None when all allow it.

    ``recent_actions`` are (epoch seconds, operation) pairs; entries outside ``(now - 1 h, now]``
    are ignored. ``nodes`` is the cluster's node list, ``drained_by_us`` the names of those
    drained with our reason tag. ``counted`` says which history ``recent_actions`` holds.
    ``caps`` adds the administrator's caps (``limits.AdminCaps``).
    """
    planned = planned_operations(advice)
    if planned == 0:
        return limits.LimitReport(counted=counted)
    maximum = spec.blast_radius.max_actions_per_hour
    checks = [_actions_per_hour(maximum, planned, recent_actions, now)]
    if caps is not None and caps.actions_per_hour is not None:
        checks.append(_actions_per_hour(caps.actions_per_hour, planned, recent_actions, now, cap=True))
    if advice.drain_nodes:
        checks.extend(_drained_share(spec.blast_radius.max_drained_share, advice.drain_nodes, nodes, drained_by_us))
    out = advice.nodes_taken_out  # drains, and a Kubernetes workload's exclusions (cordon + taint)
    if out and caps is not None:
        checks.extend(_nodes_out(caps, out, nodes, drained_by_us))
    return limits.LimitReport(checks=checks, counted=counted)


def decide(
    spec: model.RecoveryPolicySpec,
    *,
    advice: advice_model.Advice,
    recent_actions: Sequence[tuple[float, str]],
    nodes: Sequence[workloads.NodeSnapshot],
    drained_by_us: Collection[str],
    now: float,
    counted: str = "",
    caps: limits.AdminCaps | None = None,
) -> limits.LimitReport:
    """``evaluate``, degraded rather than abandoned: when a policy's limit refuses the whole advice but
    the advice without its drains is allowed, the report allows that rest and names the refused drains
    (``refused_drains``, with the whole advice's blocking checks in ``refused``). A blocking cap is
    returned as it is (the breaker opens; nothing is carried out)."""
    whole = evaluate(spec, advice=advice, recent_actions=recent_actions, nodes=nodes, drained_by_us=drained_by_us,
                     now=now, counted=counted, caps=caps)
    if not whole.would_block or whole.breaker_reason or not advice.drain_nodes \
            or advice.action is vocab.AdviceAction.NONE:
        return whole
    rest = evaluate(spec, advice=without_drains(advice), recent_actions=recent_actions, nodes=nodes,
                    drained_by_us=drained_by_us, now=now, counted=counted, caps=caps)
    if rest.would_block:
        return whole
    return rest.model_copy(update={"refused_drains": sorted(set(advice.drain_nodes)),
                                   "refused": [c for c in whole.checks if c.would_block]})


def without_drains(advice: advice_model.Advice) -> advice_model.Advice:
    """``advice`` with its drains left out: what a degraded advice carries out."""
    return advice.model_copy(update={"drain_nodes": []})


def actions_per_hour(
    spec: model.RecoveryPolicySpec, advice: advice_model.Advice, recent_actions: Sequence[tuple[float, str]],
    now: float,
) -> limits.LimitCheck | None:
    """Only the ``maxActionsPerHour`` check of ``advice`` (None: it plans no operation). For a backtest
    that knows the operations of the past but not the cluster's node list at the time."""
    planned = planned_operations(advice)
    return _actions_per_hour(spec.blast_radius.max_actions_per_hour, planned, recent_actions, now) if planned else None


def _actions_per_hour(
    maximum: int, planned: int, recent_actions: Sequence[tuple[float, str]], now: float, *, cap: bool = False,
) -> limits.LimitCheck:
    done = sum(1 for at, _ in recent_actions if now - WINDOW_S < at <= now)
    blocked = done + planned > maximum
    name = limits.CAP_ACTIONS_PER_HOUR if cap else limits.ACTIONS_PER_HOUR
    reason = f"blast radius: {done} operations in the last hour + {planned} planned > {name} {maximum}" \
        if blocked else ""
    return limits.LimitCheck(limit=name, maximum=maximum, planned=planned, in_window=done,
                             would_block=blocked, reason=reason, cap=cap)


def _nodes_out(
    caps: limits.AdminCaps, drain: Sequence[str], nodes: Sequence[workloads.NodeSnapshot],
    drained_by_us: Collection[str],
) -> list[limits.LimitCheck]:
    """The administrator's node caps: our nodes out of service at once, absolute and as a share of the
    cluster (and, through ``_drained_share``, of each partition)."""
    ours = set(drained_by_us)
    fresh = sorted(set(drain) - ours)
    out = len(ours) + len(fresh)
    checks: list[limits.LimitCheck] = []
    if caps.nodes_out is not None:
        blocked = out > caps.nodes_out
        reason = (f"blast radius: draining {', '.join(fresh)} would put {out} nodes out of service by us > "
                  f"{limits.CAP_NODES_OUT} {caps.nodes_out}" if blocked else "")
        checks.append(limits.LimitCheck(limit=limits.CAP_NODES_OUT, maximum=caps.nodes_out, planned=len(fresh),
                                        drained_by_us=len(ours), would_block=blocked, reason=reason, cap=True))
    if caps.nodes_out_share is not None:
        total = len({n.name for n in nodes} | ours | set(fresh))
        share = out / total if total else 1.0
        blocked = share > caps.nodes_out_share
        reason = (f"blast radius: draining {', '.join(fresh)} would put {out} of {total} nodes of the cluster "
                  f"({share:.0%}) out of service by us > {limits.CAP_NODES_OUT_SHARE} {caps.nodes_out_share:.0%}"
                  if blocked else "")
        checks.append(limits.LimitCheck(limit=limits.CAP_NODES_OUT_SHARE, maximum=caps.nodes_out_share,
                                        planned=len(fresh), partition_nodes=total, drained_by_us=len(ours),
                                        share=round(share, 4), would_block=blocked, reason=reason, cap=True))
        placed = {n.name for n in nodes if n.partitions}  # an unplaced node is the policy check's refusal
        if [n for n in drain if n in placed]:
            checks.extend(_drained_share(caps.nodes_out_share, [n for n in drain if n in placed], nodes,
                                         drained_by_us, cap=True))
    return checks


def _drained_share(
    maximum: float,
    drain: Sequence[str],
    nodes: Sequence[workloads.NodeSnapshot],
    drained_by_us: Collection[str],
    *,
    cap: bool = False,
) -> list[limits.LimitCheck]:
    name = limits.CAP_NODES_OUT_SHARE if cap else limits.DRAINED_SHARE
    by_name = {n.name: n for n in nodes}
    unplaced = sorted(n for n in set(drain) if n not in by_name or not by_name[n].partitions)
    if unplaced:
        # No partition, no denominator: refuse rather than guess a share.
        return [limits.LimitCheck(
            limit=name, maximum=maximum, planned=len(set(drain)), would_block=True, cap=cap,
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
            f"{partition} ({share:.0%}) in our drain > {name} {maximum:.0%}"
            if blocked else ""
        )
        checks.append(limits.LimitCheck(
            limit=name, maximum=maximum, cap=cap, planned=len(fresh), partition=partition,
            partition_nodes=len(members), drained_by_us=len(ours), share=round(share, 4), would_block=blocked,
            reason=reason,
        ))
    return checks
