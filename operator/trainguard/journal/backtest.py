"""Policy backtest: every recorded decision replayed under a changed policy set, compared.

Place: above ``journal.replay``; the CLI (``trainguard backtest``) and the HTTP API call ``run``.

How a decision is replayed under the new set: the recorded scheduler snapshot is routed by the new
``PolicySet`` exactly as the engine routes a job (the opt-in comment's ``policy=NAME`` and
selectors), the comment's overrides are applied, then ``journal.replay.decision`` attributes and
decides with the recorded inputs and clock. Decisions are replayed oldest first across all
workloads, so ``maxActionsPerHour`` is evaluated over the operations the new policy would have
carried out before (as in Action mode: every workload and policy counts).

Limits of a backtest, stated in every summary's ``notes``:
- counterfactual history is not simulated: the ledger, later attempts and the scheduler's state are
  the recorded ones, so a decision that follows a changed one is flagged ``after_change``;
- detection settings (hang timeout, patterns) are not re-run: anomalies are journal inputs;
- ``maxDrainedShare`` needs the cluster's node list at the time, which the journal does not keep.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from trainguard.journal import entries, replay
from trainguard.model import vocab
from trainguard.policy import blast_radius, loader, overrides
from trainguard.policy import model as policy_model
from trainguard.store import journal as journal_store

NOTES = (
    "replayed with the recorded ledger, attempts and scheduler snapshots: later decisions of a workload "
    "whose earlier decision changed are flagged after_change",
    "anomalies are replayed as recorded: detection settings (hangTimeout, extra patterns) are not re-run",
    "maxDrainedShare is not evaluated (the journal keeps no node list); maxActionsPerHour is, over the "
    "replayed operations of every workload",
)

Row = dict[str, Any]


@dataclass
class _Totals:
    decisions: int = 0
    changed: int = 0
    workloads: set[str] = field(default_factory=set)
    affected: set[str] = field(default_factory=set)
    requeues: list[int] = field(default_factory=lambda: [0, 0])
    excluded: list[set[str]] = field(default_factory=lambda: [set(), set()])
    drained: list[set[str]] = field(default_factory=lambda: [set(), set()])
    blocked: int = 0
    extra: int = 0
    removed: int = 0
    not_covered: int = 0


def _effective(policies: loader.PolicySet, entry: entries.AdviceEntry) -> tuple[
        policy_model.RecoveryPolicySpec | None, str, str]:
    """The new set's effective policy for the recorded job: (spec, name, why when None)."""
    opt_in = overrides.parse_opt_in(entry.job.comment) or overrides.OptIn()
    policy, route = policies.route(opt_in.policy_name, entry.job)
    if policy is None:
        return None, "", route.reason
    spec, _errors = overrides.resolve(policy.spec, opt_in)
    return spec, route.policy or "", ""


class TooLong(Exception):
    """The replay passed its deadline (the API bounds its run time)."""


def run(advice_entries: Iterable[entries.AdviceEntry], policies: loader.PolicySet, *,
        every: bool = False, deadline: float | None = None) -> tuple[list[Row], Row]:
    """Rows (each changed decision, or every one with ``every``) and the summary object.

    ``deadline`` (``time.monotonic()`` value): raise ``TooLong`` once it has passed.
    """
    rows: list[Row] = []
    totals = _Totals()
    recent: collections.deque[tuple[float, str]] = collections.deque()
    """Operations the new policy carried out in the last hour (older ones leave: decisions come in time order)."""
    changed_workloads: set[str] = set()
    for entry in sorted(advice_entries, key=lambda e: e.at):
        old = entry.advice
        if deadline is not None and totals.decisions % 200 == 0 and time.monotonic() > deadline:
            raise TooLong(f"stopped after {totals.decisions} decisions")
        totals.decisions += 1
        totals.workloads.add(old.workload)
        spec, name, why = _effective(policies, entry)
        while recent and recent[0][0] <= entry.at - blast_radius.WINDOW_S:
            recent.popleft()
        blocked = ""
        if spec is None:
            totals.not_covered += 1
            new_action, new_exclude, new_drain, new_category = vocab.AdviceAction.NONE, [], [], ""
            reasons = [f"not covered by the new policies: {why}"]
        else:
            verdict, new = replay.decision(entry, spec, name)
            check = blast_radius.actions_per_hour(spec, new, recent, entry.at)
            if check is not None and check.would_block:
                blocked = check.reason
                totals.blocked += 1
            elif new.action != vocab.AdviceAction.NONE:
                recent.append((entry.at, new.action.value))
                recent.extend((entry.at, "drain_node") for _ in new.drain_nodes)
            new_action, new_exclude, new_drain = new.action, new.exclude_nodes, new.drain_nodes
            new_category, reasons = verdict.category.value, list(new.reasons)
        for index, (action, exclude, drain) in enumerate(((old.action, old.exclude_nodes, old.drain_nodes),
                                                           (new_action, new_exclude, new_drain))):
            totals.requeues[index] += action == vocab.AdviceAction.REQUEUE
            totals.excluded[index].update(exclude)
            totals.drained[index].update(drain)
        differs = (old.action != new_action or sorted(old.exclude_nodes) != sorted(new_exclude)
                   or sorted(old.drain_nodes) != sorted(new_drain) or bool(blocked))
        if differs:
            totals.changed += 1
            totals.affected.add(old.workload)
        requeue = vocab.AdviceAction.REQUEUE
        totals.extra += old.action != requeue and new_action == requeue
        totals.removed += old.action == requeue and new_action != requeue
        if not (differs or every):
            continue
        row: Row = {
            "workload": old.workload, "attempt": old.attempt, "generation": old.generation,
            "time": entry.at, "recorded": old.action.value, "replayed": new_action.value, "differs": differs,
            "recorded_policy": old.policy, "replayed_policy": name,
            "category": entry.attribution.verdict.category.value, "replayed_category": new_category,
            "recorded_exclusions": list(old.exclude_nodes), "replayed_exclusions": list(new_exclude),
            "recorded_drains": list(old.drain_nodes), "replayed_drains": list(new_drain),
            "stop_vs_retry": _stop_vs_retry(old.action, new_action), "blocked_by": blocked or None,
            "after_change": old.workload in changed_workloads, "reasons": reasons,
        }
        rows.append(row)
        if differs:
            changed_workloads.add(old.workload)
    summary: Row = {
        "summary": True, "decisions": totals.decisions, "changed_decisions": totals.changed,
        "workloads": len(totals.workloads), "workloads_affected": len(totals.affected),
        "requeues_recorded": totals.requeues[0], "requeues_replayed": totals.requeues[1],
        "extra_requeues": totals.extra, "removed_requeues": totals.removed,
        "nodes_excluded_recorded": sorted(totals.excluded[0]), "nodes_excluded_replayed": sorted(totals.excluded[1]),
        "nodes_drained_recorded": sorted(totals.drained[0]), "nodes_drained_replayed": sorted(totals.drained[1]),
        "blocked_by_limits": totals.blocked, "not_covered": totals.not_covered, "notes": list(NOTES),
    }
    return rows, summary


def _stop_vs_retry(old: vocab.AdviceAction, new: vocab.AdviceAction) -> str | None:
    """``"requeue -> stop"`` and the like when the recorded and replayed actions differ."""
    return None if old == new else f"{old.value} -> {new.value}"


async def load(store: journal_store.JournalStore, *, workload: str | None = None, since: float | None = None,
               until: float | None = None) -> list[entries.AdviceEntry]:
    """The recorded decisions to replay, oldest first."""
    texts = await store.read_json(kind=entries.ADVICE, workload=workload, since=since, until=until)
    return [entries.AdviceEntry.model_validate_json(text) for text in texts]
