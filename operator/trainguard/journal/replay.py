"""Replay: a journal entry -> attribute -> decide, under a given policy, with the recorded clock.

Place: above the stages (``attribute``, ``policy``), below the engine and the CLI. Replaying an
entry under the policy it was recorded with must give back the recorded verdict and advice exactly
(the test over the engine scenarios' and a real-Slurm run's journals checks it); under another
policy it is the backtest's answer (``journal.backtest``).

What is replayed and what is an input: detection ran live over the whole output, so the anomaly
(its category, evidence lines with their pattern ids, suspects) is an input here, as are the node
evidence read at the time and the scheduler's snapshot. A verdict from an external attribution
service is kept as recorded (the service is not called again).
"""

from __future__ import annotations

from typing import Any

from trainguard.attribute import allocation as alloc
from trainguard.attribute import evidence as node_evidence
from trainguard.attribute import lemon, rules
from trainguard.journal import entries
from trainguard.model import advice, verdicts
from trainguard.policy import decide
from trainguard.policy import model as policy_model


def spec_of(data: dict[str, Any]) -> policy_model.RecoveryPolicySpec:
    return policy_model.RecoveryPolicySpec.model_validate(data)


def attribute(item: entries.Attribution, spec: policy_model.RecoveryPolicySpec) -> verdicts.Verdict:
    """The verdict ``item``'s inputs give under ``spec`` (its lemon-node rule)."""
    if item.external:
        return item.verdict
    rule = lemon.LemonRule(spec.exclusion.lemon_node_threshold, spec.exclusion.lemon_node_window)
    history = lemon.NodeHistory(implications=[i for i in item.implications if i.at >= item.at - rule.window_s])
    placed = set(item.allocation)
    verdict = rules.attribute(
        item.anomaly, node_history=history, lemon_rule=rule, now=item.at, workload=item.workload,
        attempt=item.attempt, job_nodes=item.job_nodes, allocation=placed,
    )
    verdict = node_evidence.apply(verdict, item.node_evidence, placed)
    return alloc.confine_verdict(verdict, item.anomaly, placed)


def decision(
    entry: entries.AdviceEntry, spec: policy_model.RecoveryPolicySpec, policy_name: str,
    verdict: verdicts.Verdict | None = None,
) -> tuple[verdicts.Verdict, advice.Advice]:
    """The verdict and the advice ``entry``'s inputs give under ``spec`` (named ``policy_name``)."""
    item = entry.attribution
    verdict = verdict if verdict is not None else attribute(item, spec)
    result = decide.decide(
        spec, workload=item.workload, attempt=item.attempt, anomaly=item.anomaly, verdict=verdict,
        history=entry.history, job=entry.job, generation=entry.generation, now=entry.at, policy_name=policy_name,
        partition_nodes=entry.partition_nodes, own_exclusions=entry.own_exclusions, allocation=set(entry.allocation),
        node_actions=entry.node_actions,
    )
    if entry.route is not None:
        result = result.model_copy(update={"route": entry.route})
    return verdict, result


def same_policy(entry: entries.AdviceEntry) -> tuple[verdicts.Verdict, advice.Advice]:
    """Replay under the recorded effective policy: must equal (entry.attribution.verdict, entry.advice)."""
    return decision(entry, spec_of(entry.attribution.spec), entry.attribution.policy)


def parse(kind: str, payload: dict[str, Any]) -> entries.VerdictEntry | entries.AdviceEntry | None:
    """A stored payload as its entry model (None for the kinds replay does not use)."""
    if kind == entries.VERDICT:
        return entries.VerdictEntry.model_validate(payload)
    if kind == entries.ADVICE:
        return entries.AdviceEntry.model_validate(payload)
    return None
