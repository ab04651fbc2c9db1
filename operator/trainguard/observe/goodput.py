"""Goodput accounting: productive time and time lost to failures, from the audit trail alone.

Place: ``observe/`` (a reading of what the loop recorded; it decides nothing). Input: the
per-attempt facts of ``store.goodput``; output: one ``Failure`` per failed attempt and rows
aggregated per workload, cause category, node or policy (``trainguard goodput``, the API, the
metrics).

One failed attempt's wall time is cut into consecutive, non-overlapping pieces, each clamped so
that none is negative (clocks of log lines and of the engine may disagree by a little):

    start -> last checkpoint        productive
    last checkpoint -> onset        work_lost   (redone after the restart; no checkpoint in the
                                                 attempt: everything since its start)
    onset -> anomaly recorded       detection   (onset: when the first error line was written,
                                                 or the last progress line before a hang)
    anomaly -> advice               decision
    advice -> requeue issued        action      (only when Trainguard requeued)
    requeue (else advice/anomaly)   requeue_wait (until the next attempt started running)
      -> next attempt running

so ``lost = work_lost + detection + decision + action + requeue_wait`` and productive + lost is
exactly the time from the attempt's start to the next attempt's start. An attempt counts as
failed when it has an anomaly and either ended in a state other than COMPLETED or was followed
by another attempt; an attempt that ended failed without any anomaly counts too (onset: its end).

Without Trainguard (``baseline``): estimated only for failures Trainguard itself requeued, and
only for causes whose unattended course is known; ``estimate`` names the basis, ``none`` when
there is no honest one:

- ``job_exit``: a crash (or the job's own watchdog line): the job ends by itself as fast as we
  saw it, so detection is as observed; then a person requeues it ``manual_delay_s`` later (an
  assumption, a flag) and the scheduler wait is as observed.
- ``job_timeout``: a hang found from silence: the job's own collective timeout (``job_timeout_s``,
  NCCL's default 600 s) would have ended it that long after the stall began; then as above.
- ``none``: slowdowns (no timeout ends a slow job), failures requeued by someone else (what
  happened is itself the unattended course), failures never recovered.
"""

from __future__ import annotations

import asyncio
import dataclasses
import statistics
import weakref
from collections.abc import Iterable, Sequence
from typing import Any, Final

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.ext.asyncio import AsyncEngine

from trainguard.store import goodput as facts_mod

GROUPINGS: Final = ("workload", "category", "node", "policy")
DEFAULT_JOB_TIMEOUT_S: Final = 600.0
"""NCCL's default collective timeout in PyTorch: the job's own hang detection without Trainguard."""
DEFAULT_MANUAL_DELAY_S: Final = 1800.0
"""Assumed time for a person to notice a failed job and requeue it (a flag: sites differ)."""

_HANG_SELF_ENDING: Final = frozenset({"nccl_timeout"})
"""Hang categories whose first line is the job's own watchdog: it ends the job without us."""
_CRASH_SYMPTOMS: Final = frozenset({"crash"})
_HANG_SYMPTOMS: Final = frozenset({"hang"})
_SUCCESS: Final = "COMPLETED"


@dataclasses.dataclass(frozen=True)
class Failure:
    """Time lost to one failed attempt (seconds)."""

    workload: str
    attempt: int
    policy: str
    category: str
    symptom: str
    nodes: tuple[str, ...]
    onset_at: float
    work_lost_s: float
    detection_s: float
    decision_s: float
    action_s: float
    requeue_wait_s: float
    recovered: bool
    """A later attempt started running."""
    requeued_by: str
    """``trainguard`` (our requeue action), ``other`` (Slurm, a person) or ``none``."""
    checkpoint_basis: str
    """``checkpoint_line``: work lost since the attempt's last checkpoint line; ``attempt_start``:
    no checkpoint line in the attempt, all its work is lost."""
    baseline_lost_s: float | None
    estimate: str

    @property
    def lost_s(self) -> float:
        return self.work_lost_s + self.detection_s + self.decision_s + self.action_s + self.requeue_wait_s

    @property
    def repair_s(self) -> float:
        """Onset to the next attempt running (the MTTR sample); meaningful when ``recovered``."""
        return self.detection_s + self.decision_s + self.action_s + self.requeue_wait_s


@dataclasses.dataclass(frozen=True)
class AttemptAccount:
    workload: str
    attempt: int
    policy: str
    nodes: tuple[str, ...]
    productive_s: float
    uptime_s: float
    """Running time until the failure's onset (or the end): the MTBF numerator."""
    failure: Failure | None


@dataclasses.dataclass(frozen=True)
class Assumptions:
    job_timeout_s: float = DEFAULT_JOB_TIMEOUT_S
    manual_delay_s: float = DEFAULT_MANUAL_DELAY_S


def _span(start: float | None, end: float | None) -> float:
    if start is None or end is None:
        return 0.0
    return max(0.0, end - start)


def _baseline(*, category: str, symptom: str, work_lost: float, detection: float,
              scheduler_wait: float, requeued_by: str, recovered: bool, assume: Assumptions
              ) -> tuple[float | None, str]:
    if requeued_by != "trainguard" or not recovered:
        return None, "none"
    if symptom in _CRASH_SYMPTOMS or category in _HANG_SELF_ENDING:
        unattended_detection, basis = detection, "job_exit"
    elif symptom in _HANG_SYMPTOMS:
        unattended_detection, basis = max(detection, assume.job_timeout_s), "job_timeout"
    else:
        return None, "none"
    return work_lost + unattended_detection + assume.manual_delay_s + scheduler_wait, basis


def account(facts: Sequence[facts_mod.AttemptFacts], *, now: float,
            assume: Assumptions = Assumptions()) -> list[AttemptAccount]:
    """Each attempt's productive time and, when it failed, its ``Failure``; ``now`` ends running attempts."""
    by_workload: dict[str, list[facts_mod.AttemptFacts]] = {}
    for f in facts:
        by_workload.setdefault(f.workload, []).append(f)
    out = []
    for attempts in by_workload.values():
        attempts.sort(key=lambda f: f.attempt)
        for index, f in enumerate(attempts):
            following = next((n for n in attempts[index + 1:] if n.started_at is not None), None)
            out.append(_one(f, following, now=now, assume=assume))
    return out


def _one(f: facts_mod.AttemptFacts, following: facts_mod.AttemptFacts | None, *, now: float,
         assume: Assumptions) -> AttemptAccount:
    start = f.started_at
    ended_failed = f.ended_at is not None and f.state not in (_SUCCESS, "RUNNING", "PENDING", "")
    failed = (f.onset_at is not None and (following is not None or ended_failed)) or (
        f.onset_at is None and ended_failed and f.state != "CANCELLED")
    if not failed:
        end = f.ended_at if f.ended_at is not None else now
        run = _span(start, end)
        return AttemptAccount(f.workload, f.attempt, f.policy, f.nodes, run, run, None)
    onset = f.onset_at if f.onset_at is not None else f.ended_at
    assert onset is not None  # failed implies an onset or an end
    if start is not None:
        onset = max(onset, start)
    checkpoint = f.last_checkpoint_at
    if checkpoint is not None and start is not None and checkpoint >= start:
        basis, saved_at = "checkpoint_line", min(checkpoint, onset)
    else:
        basis, saved_at = "attempt_start", start if start is not None else onset
    detected = max(f.detected_at, onset) if f.detected_at is not None else onset
    advised = max(f.advised_at, detected) if f.advised_at is not None else detected
    requeued = max(f.requeued_at, advised) if f.requeued_at is not None else None
    recovered = following is not None
    next_start = following.started_at if following is not None else None
    if requeued is not None:
        requeued_by = "trainguard"
    elif recovered:
        requeued_by = "other"
    else:
        requeued_by = "none"
    wait_from = requeued if requeued is not None else advised
    work_lost, detection = _span(saved_at, onset), _span(onset, detected)
    scheduler_wait = _span(wait_from, next_start)
    category = f.verdict_category or f.anomaly_category or "none"
    symptom = f.anomaly_symptom or "crash"
    baseline, estimate = _baseline(category=category, symptom=symptom, work_lost=work_lost, detection=detection,
                                   scheduler_wait=scheduler_wait, requeued_by=requeued_by, recovered=recovered,
                                   assume=assume)
    failure = Failure(
        workload=f.workload, attempt=f.attempt, policy=f.policy, category=category, symptom=symptom,
        nodes=f.verdict_nodes or f.anomaly_nodes or f.nodes, onset_at=onset, work_lost_s=work_lost,
        detection_s=detection, decision_s=_span(detected, advised), action_s=_span(advised, requeued),
        requeue_wait_s=scheduler_wait, recovered=recovered, requeued_by=requeued_by, checkpoint_basis=basis,
        baseline_lost_s=baseline, estimate=estimate,
    )
    productive = _span(start, saved_at)
    return AttemptAccount(f.workload, f.attempt, f.policy, f.nodes, productive, _span(start, onset), failure)


# -- aggregation ---------------------------------------------------------------------------------


@dataclasses.dataclass
class _Group:
    key: str
    workloads: dict[str, None] = dataclasses.field(default_factory=dict)
    attempts: int = 0
    productive: float = 0.0
    uptime: float = 0.0
    failures: list[Failure] = dataclasses.field(default_factory=list)


def _keys(item: AttemptAccount | Failure, by: str) -> Iterable[str]:
    match by:
        case "workload":
            return (item.workload,)
        case "policy":
            return (item.policy,)
        case "category":
            return (item.category,) if isinstance(item, Failure) else ()
        case "node":
            return item.nodes or ("",)
    raise ValueError(f"unknown grouping {by!r}")


def rows(accounts: Sequence[AttemptAccount], *, by: str = "workload") -> list[dict[str, Any]]:
    """One JSON-ready row per group, largest ``lost_seconds`` first (ties by key).

    Every row has ``workload`` (the id with ``--by workload``; otherwise ``*``, the group's
    workloads being listed in ``workloads``) and ``lost_seconds``. With ``by=node`` a failure
    counts in full for each node it names, so node rows overlap; with ``by=category`` only
    failures count (productive time has no cause).
    """
    if by not in GROUPINGS:
        raise ValueError(f"unknown grouping {by!r}")
    groups: dict[str, _Group] = {}
    for acc in accounts:
        for key in _keys(acc, by):
            group = groups.setdefault(key, _Group(key))
            group.workloads.setdefault(acc.workload)
            group.attempts += 1
            group.productive += acc.productive_s
            group.uptime += acc.uptime_s
        if acc.failure is not None:
            for key in _keys(acc.failure, by):
                group = groups.setdefault(key, _Group(key))
                group.workloads.setdefault(acc.workload)
                group.failures.append(acc.failure)
    out = [_row(group, by) for group in groups.values()]
    out.sort(key=lambda r: (-r["lost_seconds"], str(r[by])))
    return out


def _round(value: float) -> float:
    return round(value, 6)


def _row(group: _Group, by: str) -> dict[str, Any]:
    fs = group.failures
    lost = sum(f.lost_s for f in fs)
    repairs = [f.repair_s for f in fs if f.recovered]
    estimated = [f for f in fs if f.baseline_lost_s is not None]
    baseline = sum(f.baseline_lost_s or 0.0 for f in estimated)
    row: dict[str, Any] = {
        "workload": group.key if by == "workload" else "*",
        by: group.key,
        "workloads": list(group.workloads) if by != "workload" else [group.key],
        "attempts": group.attempts,
        "failures": len(fs),
        "productive_seconds": _round(group.productive),
        "lost_seconds": _round(lost),
        "work_lost_seconds": _round(sum(f.work_lost_s for f in fs)),
        "detection_seconds": _round(sum(f.detection_s for f in fs)),
        "decision_seconds": _round(sum(f.decision_s for f in fs)),
        "action_seconds": _round(sum(f.action_s for f in fs)),
        "requeue_wait_seconds": _round(sum(f.requeue_wait_s for f in fs)),
        "goodput": (_round(group.productive / (group.productive + lost))
                    if by != "category" and group.productive + lost > 0 else None),
        "mttr_seconds": _round(statistics.fmean(repairs)) if repairs else None,
        "mtbf_seconds": _round(group.uptime / len(fs)) if fs and group.attempts else None,
        "estimated_failures": len(estimated),
        "baseline_lost_seconds": _round(baseline) if estimated else None,
        "saved_seconds": _round(baseline - sum(f.lost_s for f in estimated)) if estimated else None,
        "estimate": sorted({f.estimate for f in fs}) or ["none"],
    }
    return row


def failure_json(f: Failure) -> dict[str, Any]:
    """One failure as a JSON object (the API's detail and ``--by`` debugging)."""
    return {
        "workload": f.workload, "attempt": f.attempt, "policy": f.policy, "category": f.category,
        "symptom": f.symptom, "nodes": list(f.nodes), "onset_at": f.onset_at,
        "lost_seconds": _round(f.lost_s), "work_lost_seconds": _round(f.work_lost_s),
        "detection_seconds": _round(f.detection_s), "decision_seconds": _round(f.decision_s),
        "action_seconds": _round(f.action_s), "requeue_wait_seconds": _round(f.requeue_wait_s),
        "recovered": f.recovered, "requeued_by": f.requeued_by, "checkpoint_basis": f.checkpoint_basis,
        "baseline_lost_seconds": None if f.baseline_lost_s is None else _round(f.baseline_lost_s),
        "estimate": f.estimate,
    }


# -- Prometheus ----------------------------------------------------------------------------------

CAUSES: Final = ("work_lost", "detection", "decision", "action", "requeue_wait")
"""The ``cause`` label of ``trainguard_time_lost_seconds_total``: the pieces of a failure's loss."""
REFRESH_S: Final = 60.0
"""Least time between two recomputations for ``/metrics``: the accounting reads every attempt of the
database, which a scrape every few seconds must not repeat each time."""


class GoodputCollector(Collector):
    """``trainguard_time_lost_seconds_total{cause}``, ``trainguard_productive_seconds_total`` and
    ``trainguard_failures_total{estimate}`` from the latest accounting of the whole audit database
    (``refresh``, called before a scrape and at most every ``REFRESH_S``). Totals over history, so
    they only grow: productive time counts attempts that ended (a running attempt's could shrink
    once it fails), lost time counts failures (a failure's requeue wait is added when the next
    attempt starts)."""

    def __init__(self, refresh_s: float = REFRESH_S) -> None:
        self.refresh_s = refresh_s
        self.lost: dict[str, float] = dict.fromkeys(CAUSES, 0.0)
        self.productive = 0.0
        self.failures: dict[str, int] = {}
        self._at: float | None = None
        self._lock = asyncio.Lock()

    def describe(self) -> Iterable[Metric]:
        return list(self._families())

    def collect(self) -> Iterable[Metric]:
        return list(self._families())

    def _families(self) -> Iterable[Metric]:
        lost = CounterMetricFamily("trainguard_time_lost_seconds", "Time lost to failures, by cause (work lost since "
                                   "the last checkpoint, detection, decision, action, requeue wait; docs/goodput.md)",
                                   labels=["cause"])
        for cause in CAUSES:
            lost.add_metric([cause], self.lost[cause])
        yield lost
        productive = CounterMetricFamily("trainguard_productive_seconds", "Productive time of ended attempts "
                                         "(start to the last checkpoint before a failure, or to the end)")
        productive.add_metric([], self.productive)
        yield productive
        failures = CounterMetricFamily("trainguard_failures", "Failed attempts, by the basis of the without-"
                                       "Trainguard estimate (job_exit, job_timeout, none)", labels=["estimate"])
        for basis in ("job_exit", "job_timeout", "none"):
            failures.add_metric([basis], self.failures.get(basis, 0))
        yield failures

    def update(self, accounts: Sequence[AttemptAccount], facts: Sequence[facts_mod.AttemptFacts]) -> None:
        ended = {(f.workload, f.attempt) for f in facts if f.ended_at is not None}
        fs = [a.failure for a in accounts if a.failure is not None]
        self.lost = {
            "work_lost": sum(f.work_lost_s for f in fs), "detection": sum(f.detection_s for f in fs),
            "decision": sum(f.decision_s for f in fs), "action": sum(f.action_s for f in fs),
            "requeue_wait": sum(f.requeue_wait_s for f in fs),
        }
        self.productive = sum(a.productive_s for a in accounts if (a.workload, a.attempt) in ended)
        counts: dict[str, int] = {}
        for f in fs:
            counts[f.estimate] = counts.get(f.estimate, 0) + 1
        self.failures = counts

    async def refresh(self, engine: AsyncEngine, *, now: float) -> None:
        """Recompute from the database unless the last accounting is younger than ``refresh_s``."""
        async with self._lock:
            if self._at is not None and now - self._at < self.refresh_s:
                return
            facts = await facts_mod.attempt_facts(engine)
            # ~1 s of pure Python per 10,000 workloads: off the event loop the engine's timers share
            accounts = await asyncio.to_thread(account, facts, now=now)
            self.update(accounts, facts)
            self._at = now


_COLLECTORS: weakref.WeakKeyDictionary[CollectorRegistry, GoodputCollector] = weakref.WeakKeyDictionary()


def collector_on(registry: CollectorRegistry) -> GoodputCollector:
    """The one ``GoodputCollector`` registered on ``registry`` (created and registered on first use)."""
    found = _COLLECTORS.get(registry)
    if found is None:
        found = GoodputCollector()
        registry.register(found)
        _COLLECTORS[registry] = found
    return found
