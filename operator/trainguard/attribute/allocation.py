"""The workload's allocation: the only nodes a recovery may name, exclude, drain or remember.

Place in the loop: between detection and attribution (``confine_anomaly``), inside the built-in
rules (``attribute.rules.attribute`` takes the allocation) and after any external verdict
(``confine_verdict``), so every path to a suspect node passes the same check.

Why: node names in an anomaly come from log text (syslog prefixes, ``srun: error: nodeN``,
NCCL banners). Anyone who can write to a job's output can print any host name, and copied or
replayed lines name hosts of other jobs. Only the scheduler knows where a workload ran, so a
node is a candidate only if the scheduler placed one of the workload's attempts on it; any
other name stays in the evidence text and is listed in ``Verdict.outside_allocation``. Pure:
the engine passes the allocation (the union of every attempt's nodes, kept in the store).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from trainguard.model import anomalies, verdicts


def split(nodes: Iterable[str], allocation: Collection[str]) -> tuple[list[str], list[str]]:
    """(nodes inside the allocation, nodes outside it), each without duplicates, in order."""
    inside: list[str] = []
    outside: list[str] = []
    for node in dict.fromkeys(nodes):
        (inside if node in allocation else outside).append(node)
    return inside, outside


def named_nodes(anomaly: anomalies.Anomaly) -> list[str]:
    """Every host name the anomaly gives: its suspects and the nodes its evidence lines came from."""
    return list(dict.fromkeys([*anomaly.suspect_nodes, *(e.node for e in anomaly.evidence if e.node)]))


def confine_anomaly(anomaly: anomalies.Anomaly, allocation: Collection[str]) -> anomalies.Anomaly:
    """``anomaly`` with only suspects inside the allocation; its evidence is left as it was read."""
    inside, outside = split(anomaly.suspect_nodes, allocation)
    if not outside:
        return anomaly
    return anomaly.model_copy(update={"suspect_nodes": inside})


def confine_verdict(
    verdict: verdicts.Verdict, anomaly: anomalies.Anomaly, allocation: Collection[str]
) -> verdicts.Verdict:
    """``verdict`` with suspects and lemon nodes inside the allocation only, and every outside name
    the anomaly or the verdict gave listed in ``outside_allocation`` with a reason."""
    suspects, outside_suspects = split(verdict.suspect_nodes, allocation)
    lemons, outside_lemons = split(verdict.lemon_nodes, allocation)
    _, outside_named = split(named_nodes(anomaly), allocation)
    outside = list(dict.fromkeys([*verdict.outside_allocation, *outside_named, *outside_suspects, *outside_lemons]))
    if not outside and suspects == verdict.suspect_nodes and lemons == verdict.lemon_nodes:
        return verdict
    reasons = list(verdict.reasons)
    fresh = [node for node in outside if node not in verdict.outside_allocation]
    if fresh:
        reasons.append(outside_reason(fresh))
    return verdict.model_copy(
        update={"suspect_nodes": suspects, "lemon_nodes": lemons, "outside_allocation": outside, "reasons": reasons}
    )


def outside_reason(nodes: Iterable[str]) -> str:
    return (
        f"named in the log but never allocated to this workload: {', '.join(nodes)} "
        "(evidence text only: not a suspect, never excluded, drained or remembered)"
    )
