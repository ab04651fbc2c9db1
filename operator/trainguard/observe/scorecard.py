"""The Monitor-mode scorecard: for each advice recorded in Monitor mode, what happened next, and a score.

Place: beside the metrics in ``observe/``: it reads what the loop recorded (the audit store) and what
the scheduler shows now, and judges; it never changes either. ``score_advice`` is pure (facts in, one
``Scored`` out) so every rule is tested without a cluster; ``gather`` reads the facts; ``summarise``
turns the scored rows into one summary per policy with the "ready for Action" signal.

What the scheduler lets us tell apart (docs/scorecard.md has the full table):

- a requeue shows as a higher restart count (Slurm ``Restarts``) and, in our store, as a later
  attempt. Who requeued it is not recorded by Slurm (neither ``scontrol show job`` nor sacct name the
  requester); what can be told: Slurm itself requeues only on a node failure or preemption (the
  attempt ended ``NODE_FAIL`` / ``PREEMPTED``), Trainguard only with its own action rows (none in
  Monitor mode), so any other requeue of a failed job was a person (user or admin, not told apart);
- the job's excluded nodes (``ExcNodeList``) are read while the scheduler still knows the job; after
  it forgot the job, the later attempt's recorded nodes show whether the suspect was avoided;
- a node drained by someone else is a node the scheduler shows unusable whose reason does not start
  with our ``trainguard:`` tag; the reason is kept as evidence. Only a drain still in place when the
  scorecard is read is seen (a drained-then-resumed node is not).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from trainguard.model import vocab, workloads
from trainguard.store import snapshots as snapshots_mod

OUR_REASON_PREFIX = "trainguard:"
"""Reasons we write start with this (as ``schedulers.base.OUR_REASON_PREFIX``): those drains are ours."""

SLURM_REQUEUE_STATES = frozenset({"NODE_FAIL", "PREEMPTED"})
"""An attempt that ended in one of these states was requeued by Slurm itself (``--requeue`` jobs)."""
FAILED_STATES = frozenset({"FAILED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"})
"""Ends of an attempt that count as "failed again"."""
DEFAULT_GPUS_PER_NODE = 8
"""GPUs assumed per node for the GPU-hours estimate when the caller gives none."""


class Score(enum.StrEnum):
    """The four scores of the contract's ``score`` field."""

    AGREE = "agree"
    DISAGREE = "disagree"
    WOULD_HAVE_HELPED = "would-have-helped"
    UNKNOWN = "unknown"


class Detail(enum.StrEnum):
    """The finer value behind a score (``detail``); docs/scorecard.md explains each."""

    REQUEUED_EXCLUDING_SUSPECT = "requeued-excluding-suspect"
    REQUEUED_AVOIDING_SUSPECT = "requeued-avoiding-suspect"
    REQUEUED = "requeued"
    SUSPECT_DRAINED = "suspect-drained-by-other"
    FAILED_AGAIN_ON_SUSPECT = "failed-again-on-suspect"
    IGNORED_JOB_STAYED_DOWN = "ignored-job-stayed-down"
    REQUEUED_KEEPING_SUSPECT_COMPLETED = "requeued-keeping-suspect-completed"
    CANCELLED_INSTEAD = "cancelled-instead"
    COMPLETED_WITHOUT_ACTION = "completed-without-action"
    STOP_BUT_REQUEUED_COMPLETED = "stop-but-requeued-completed"
    STOP_REQUEUED_FAILED_AGAIN = "stop-requeued-failed-again"
    STOP_LEFT_DOWN = "stop-left-down"
    NO_OUTCOME_YET = "no-outcome-yet"
    JOB_FORGOTTEN = "job-forgotten"
    NOT_SCORED = "not-scored"


AGREEING = frozenset({Score.AGREE, Score.WOULD_HAVE_HELPED})
"""Scores that count for the advice in the agreement rate: people did what it said, or not doing it cost."""


@dataclasses.dataclass(frozen=True)
class AttemptFact:
    """One attempt as our store recorded it."""

    attempt: int
    state: str = ""
    nodes: tuple[str, ...] = ()
    started_at: float | None = None
    ended_at: float | None = None
    suspects: tuple[str, ...] = ()
    """Suspect nodes of this attempt's latest verdict (empty: no verdict)."""
    category: str = ""
    """Category of this attempt's latest verdict."""


@dataclasses.dataclass(frozen=True)
class AdviceFact:
    """One Monitor-mode advice as recorded (the audit ``advice`` record and its attempt's verdict)."""

    workload: str
    attempt: int
    generation: int
    action: str
    policy: str
    at: float
    exclusions: tuple[str, ...] = ()
    drains: tuple[str, ...] = ()
    suspects: tuple[str, ...] = ()
    """The verdict's suspect nodes and lemon nodes for the advised attempt."""
    category: str = ""

    @property
    def nodes(self) -> tuple[str, ...]:
        """The nodes the advice blames: what it would drain, and the exclusions that are the verdict's
        suspects (the advice's exclusions also carry the user's own ``--exclude``, which blames nothing).
        Without a verdict: every exclusion and drain."""
        if not self.suspects:
            return tuple(dict.fromkeys((*self.exclusions, *self.drains)))
        return tuple(dict.fromkeys((*(n for n in self.exclusions if n in self.suspects), *self.drains)))


@dataclasses.dataclass(frozen=True)
class Scored:
    """One scored advice: the contract's row (``workload``, ``attempt``, ``advice``, ``score``) and why."""

    advice: AdviceFact
    score: Score
    detail: Detail
    evidence: tuple[str, ...]
    requeued_by: str = "none"
    """``none`` | ``slurm`` | ``person`` (user or admin: Slurm does not say which) | ``unknown``."""
    drained_by_other: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Blamed node -> the drain reason someone else set."""
    harmful: bool = False
    gpu_hours_saved: float | None = None

    def to_json(self) -> dict[str, Any]:
        a = self.advice
        return {
            "workload": a.workload, "attempt": a.attempt, "generation": a.generation, "advice": a.action,
            "policy": a.policy, "category": a.category, "nodes": list(a.nodes), "score": self.score.value,
            "detail": self.detail.value, "requeued_by": self.requeued_by,
            "drained_by_other": dict(self.drained_by_other), "harmful": self.harmful,
            "gpu_hours_saved": None if self.gpu_hours_saved is None else round(self.gpu_hours_saved, 3),
            "evidence": list(self.evidence),
        }


def _others_drains(blamed: Sequence[str], views: Iterable[Mapping[str, workloads.NodeSnapshot]]) -> dict[str, str]:
    """Blamed nodes someone else drained (or took down), with their reason; earliest view first."""
    drained: dict[str, str] = {}
    for nodes in views:
        for name in blamed:
            node = nodes.get(name)
            if name in drained or node is None or node.usable or node.reason.startswith(OUR_REASON_PREFIX):
                continue
            drained[name] = node.reason or "(no reason given)"
    return drained


def _snapshot_nodes(snap: snapshots_mod.Snapshot) -> dict[str, workloads.NodeSnapshot]:
    return {name: workloads.NodeSnapshot(name=name, state=view.get("state", ""), reason=view.get("reason", ""),
                                         drained="DRAIN" in view.get("state", "").upper())
            for name, view in snap.nodes.items()}


def _hours(start: float | None, end: float | None) -> float | None:
    if start is None or end is None or end < start:
        return None
    return (end - start) / 3600.0


def score_advice(
    advice: AdviceFact, attempts: Sequence[AttemptFact], job: workloads.JobSnapshot | None,
    nodes: Mapping[str, workloads.NodeSnapshot], *, stored_state: str = "",
    snapshots: Sequence[snapshots_mod.Snapshot] = (), gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
) -> Scored:
    """Score one Monitor-mode advice from what happened after it (rules in docs/scorecard.md).

    ``attempts``: the workload's recorded attempts; ``job``: the scheduler's current view (None when it
    forgot the job); ``nodes``: the scheduler's nodes by name; ``stored_state``: the workload's last
    state in our store (used when the scheduler forgot the job).
    """
    blamed = advice.nodes
    evidence: list[str] = []
    by_number = {a.attempt: a for a in attempts}
    advised = by_number.get(advice.attempt)
    later = sorted((a for a in attempts if a.attempt > advice.attempt), key=lambda a: a.attempt)
    seen = [snap for snap in snapshots if snap.at >= advice.at and snap.attempt == advice.attempt]
    restarts = [snap.restarts for snap in seen if snap.restarts is not None]
    if job is not None:
        restarts.append(job.attempt)
    requeued = bool(later) or any(r > advice.attempt for r in restarts)
    drained = _others_drains(blamed, [*(_snapshot_nodes(snap) for snap in seen), nodes])
    for name, reason in drained.items():
        evidence.append(f"node {name} drained by someone else: {reason!r}")
    last_seen = next((snap.job_state for snap in reversed(seen) if snap.job_state != "GONE"), "")
    state = job.state.value if job is not None else (last_seen or stored_state or "")
    excluded = {n for snap in seen for n in snap.excluded_nodes} | set(job.excluded_nodes if job is not None else ())
    if job is not None:
        evidence.append(f"scheduler: job {job.job_id} {state} restarts={job.attempt} "
                        f"excluded={','.join(job.excluded_nodes) or '-'}")
    elif last_seen:
        evidence.append(f"scheduler forgot the job; last snapshot {last_seen}, "
                        f"excluded={','.join(sorted(excluded)) or '-'}")
    elif stored_state:
        evidence.append(f"scheduler forgot the job; last stored state {stored_state}")
    requeued_by = "none"
    if requeued:
        ended = advised.state if advised is not None else ""
        requeued_by = "slurm" if ended in SLURM_REQUEUE_STATES else "person"
        evidence.append(f"requeued after attempt {advice.attempt} (ended {ended or 'unknown'}) by {requeued_by}")

    def result(score: Score, detail: Detail, *, harmful: bool = False, saved: float | None = None) -> Scored:
        return Scored(advice=advice, score=score, detail=detail, evidence=tuple(evidence), requeued_by=requeued_by,
                      drained_by_other=drained, harmful=harmful, gpu_hours_saved=saved)

    action = advice.action
    if action == vocab.AdviceAction.STOP:
        if requeued:
            last = later[-1] if later else None
            if (last is not None and last.state == "COMPLETED") or state == "COMPLETED":
                evidence.append("the requeued job completed: stopping it would have lost it")
                return result(Score.DISAGREE, Detail.STOP_BUT_REQUEUED_COMPLETED, harmful=True)
            failed = next((a for a in later if a.state in FAILED_STATES), None)
            if failed is not None:
                evidence.append(f"attempt {failed.attempt} failed again ({failed.state})")
                saved = _hours(failed.started_at, failed.ended_at)
                return result(Score.WOULD_HAVE_HELPED, Detail.STOP_REQUEUED_FAILED_AGAIN,
                              saved=None if saved is None else saved * max(1, len(failed.nodes)) * gpus_per_node)
            return result(Score.UNKNOWN, Detail.NO_OUTCOME_YET)
        if state in FAILED_STATES or state == "CANCELLED":
            return result(Score.AGREE, Detail.STOP_LEFT_DOWN)
        return result(Score.UNKNOWN, Detail.NO_OUTCOME_YET if state else Detail.JOB_FORGOTTEN)
    if action != vocab.AdviceAction.REQUEUE:
        return result(Score.UNKNOWN, Detail.NOT_SCORED)

    # requeue advice
    if requeued:
        again = next((a for a in later if a.state in FAILED_STATES and set(a.nodes) & set(blamed)
                      and (not a.suspects or set(a.suspects) & set(blamed))), None)
        if again is not None:
            evidence.append(f"attempt {again.attempt} failed again ({again.state}) on suspect "
                            f"{','.join(sorted(set(again.nodes) & set(blamed)))}")
            hours = _hours(again.started_at, again.ended_at)
            saved = None if hours is None else hours * max(1, len(again.nodes)) * gpus_per_node
            return result(Score.WOULD_HAVE_HELPED, Detail.FAILED_AGAIN_ON_SUSPECT, saved=saved)
        saved = None
        first = later[0] if later else None
        if advised is not None and first is not None:
            hours = _hours(advised.ended_at, first.started_at)
            saved = None if hours is None else hours * max(1, len(advised.nodes)) * gpus_per_node
        if not blamed:
            return result(Score.AGREE, Detail.REQUEUED, saved=saved)
        if set(blamed) <= excluded:
            evidence.append(f"suspect {','.join(blamed)} excluded by the person who requeued")
            return result(Score.AGREE, Detail.REQUEUED_EXCLUDING_SUSPECT, saved=saved)
        ran_on = {n for a in later for n in a.nodes}
        if ran_on and not ran_on & set(blamed):
            evidence.append(f"later attempts ran on {','.join(sorted(ran_on))}, never on the suspect")
            return result(Score.AGREE, Detail.REQUEUED_AVOIDING_SUSPECT, saved=saved)
        if drained:
            return result(Score.AGREE, Detail.SUSPECT_DRAINED, saved=saved)
        done = (later[-1].state if later else "") or state
        if done == "COMPLETED" and ran_on & set(blamed):
            evidence.append("requeued onto the suspect node, and the attempt completed there")
            return result(Score.DISAGREE, Detail.REQUEUED_KEEPING_SUSPECT_COMPLETED)
        return result(Score.UNKNOWN, Detail.NO_OUTCOME_YET)
    if drained:
        return result(Score.AGREE, Detail.SUSPECT_DRAINED)
    if state == "CANCELLED":
        evidence.append("cancelled by a person instead of requeued")
        return result(Score.DISAGREE, Detail.CANCELLED_INSTEAD)
    if state == "COMPLETED":
        evidence.append("the job completed on its own: a requeue would have restarted a job that was going to finish")
        return result(Score.DISAGREE, Detail.COMPLETED_WITHOUT_ACTION, harmful=True)
    if state in FAILED_STATES:
        evidence.append(f"nobody requeued the job: it stayed {state}")
        return result(Score.WOULD_HAVE_HELPED, Detail.IGNORED_JOB_STAYED_DOWN)
    if not state:
        return result(Score.UNKNOWN, Detail.JOB_FORGOTTEN)
    return result(Score.UNKNOWN, Detail.NO_OUTCOME_YET)


@dataclasses.dataclass(frozen=True)
class Readiness:
    """The "ready for Action" rule: enough scored advice, high agreement, nothing harmful."""

    min_scored: int = 5
    min_agreement: float = 0.8
    max_harmful: int = 0

    def describe(self) -> str:
        return (f"ready when >= {self.min_scored} advice scored (not unknown), agreement (agree + would-have-helped) "
                f">= {self.min_agreement:.0%} of them, and at most {self.max_harmful} harmful")


def summarise(rows: Iterable[Scored], rule: Readiness) -> list[dict[str, Any]]:
    """One summary object per policy (``"summary": true``), policies sorted by name."""
    by_policy: dict[str, list[Scored]] = {}
    for row in rows:
        by_policy.setdefault(row.advice.policy, []).append(row)
    summaries = []
    for policy in sorted(by_policy):
        items = by_policy[policy]
        counts = {s.value: sum(1 for r in items if r.score is s) for s in Score}
        scored = len(items) - counts[Score.UNKNOWN.value]
        agreeing = sum(1 for r in items if r.score in AGREEING)
        harmful = sum(1 for r in items if r.harmful)
        rate = agreeing / scored if scored else None
        saved = sum(r.gpu_hours_saved or 0.0 for r in items)
        why = []
        if scored < rule.min_scored:
            why.append(f"only {scored} scored advice (need {rule.min_scored})")
        if rate is None or rate < rule.min_agreement:
            why.append(f"agreement {'n/a' if rate is None else f'{rate:.0%}'} below {rule.min_agreement:.0%}")
        if harmful > rule.max_harmful:
            why.append(f"{harmful} harmful advice")
        summaries.append({
            "policy": policy, "summary": True, "advice": len(items), "scored": scored,
            "agree": counts["agree"], "disagree": counts["disagree"],
            "would_have_helped": counts["would-have-helped"], "unknown": counts["unknown"],
            "agreement_rate": None if rate is None else round(rate, 4), "harmful": harmful,
            "gpu_hours_saved": round(saved, 3), "ready_for_action": not why, "not_ready_because": why,
            "readiness_rule": rule.describe(),
        })
    return summaries
