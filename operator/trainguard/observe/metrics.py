"""Prometheus metrics of the recovery loop, derived from the audit records it commits.

Place: beside the health model, below the engine. The engine attaches one ``EngineMetrics`` to
its audit store (``store.audit.AuditObserver``) and to its own table of tracked workloads; the
shells serve it at ``/metrics`` through the health model's registry (``trainguard.http``).

Why from the audit records: every stage of the loop (detector, attribution, policy, executor,
watchdog) already writes one record per thing it does, in one place, and only committed records
are told. So the counters say exactly what ``trainguard audit`` says, no stage needs a second
reporting path, and the watchdog (which writes without going through the engine) is counted too.

Labels are low-cardinality by construction: every label value is checked against its closed
vocabulary (``model.vocab``, ``model.actions``) and anything else becomes ``other``. Workload
ids, job ids and node names are never labels: they grow without bound on a busy cluster (the
audit log and the API answer per-workload questions).

What "detection latency" measures: from the time the initiating line was *read* by the tailer
(``LogLine.received_at``; a line carries no reliable time of writing, and the tailing interval
bounds the difference) to the time the anomaly was recorded. For a hang, the initiating "line" is
the last sign of progress, so hang latencies include the policy's hang timeout by design; the
``symptom`` label keeps them apart from crashes.
"""

from __future__ import annotations

import collections
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from trainguard.act import executor as executor_mod
from trainguard.model import actions, vocab, workloads
from trainguard.store import audit

OTHER: Final = "other"
UNKNOWN_MODE: Final = "unknown"
REMEMBERED: Final = 10_000
"""How many open decisions (anomaly -> advice, advice -> outcome) are remembered for the latency
histograms; older ones are forgotten (their latency is not observed) so memory stays bounded."""

_CATEGORIES = frozenset(c.value for c in vocab.Category)
_ATTRIBUTIONS = frozenset(a.value for a in vocab.Attribution)
_SYMPTOMS = frozenset(s.value for s in vocab.Symptom)
_ADVICE_ACTIONS = frozenset(a.value for a in vocab.AdviceAction)
_MODES = frozenset(m.value for m in vocab.Mode)
_DECIDERS = frozenset(d.value for d in vocab.Decider)
_DISPOSITIONS = frozenset(d.value for d in vocab.Disposition)
_OPERATIONS = frozenset(o.value for o in actions.Operation)
_STATUSES = frozenset({*(s.value for s in actions.ActionStatus), "effect", "not-ours"})
"""``effect``: what one of our own actions was seen to do (``detect.own_actions``); ``not-ours``: somebody
else's decision seen and left alone (``act.whose``)."""
_STATES = tuple(s.value for s in workloads.JobState)

DETECTION_BUCKETS: Final = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
DECISION_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
RECOVERY_BUCKETS: Final = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0)
WRITE_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


def bounded(value: object, allowed: frozenset[str]) -> str:
    """``value`` as a label when it is in its closed vocabulary, else ``other``."""
    text = str(value) if value is not None else ""
    return text if text in allowed else OTHER


class _WorkloadStates(Collector):
    """``trainguard_workloads{state}``: the tracked workloads by the scheduler's state, counted at
    scrape time from the engine's own table (no copy to keep in sync). Every state is exported, at
    0 when none is in it, so a dashboard never sees a series vanish."""

    NAME: Final = "trainguard_workloads"
    HELP: Final = "Workloads the engine tracks, by the scheduler's job state"

    def __init__(self, owner: EngineMetrics) -> None:
        self.source: Callable[[], Iterable[str]] | None = None
        self.owner = owner
        """Keeps the ``EngineMetrics`` alive exactly as long as its registry (which holds this collector):
        its series stay registered there, so a second ``EngineMetrics`` on it would collide."""

    def describe(self) -> Iterable[Metric]:
        return [GaugeMetricFamily(self.NAME, self.HELP, labels=["state"])]

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(self.NAME, self.HELP, labels=["state"])
        counts = collections.Counter(self.source() if self.source is not None else ())
        for state in _STATES:
            family.add_metric([state], counts.pop(state, 0))
        if counts:
            family.add_metric([OTHER], sum(counts.values()))
        return [family]


class _Recent(collections.OrderedDict[tuple[Any, ...], Any]):
    """A dict that forgets its oldest entries beyond ``REMEMBERED``."""

    def remember(self, key: tuple[Any, ...], value: Any) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > REMEMBERED:
            self.popitem(last=False)


class EngineMetrics:
    """The engine's Prometheus metrics on one registry (see the module docstring).

    One per registry (``shared``): a shell that starts a new engine per leadership term keeps
    counting on the same series instead of registering them twice.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.anomalies = Counter(
            "trainguard_anomalies", "Anomalies recorded, by first-cause category and attribution (from the verdict)",
            ["category", "attribution"], registry=r)
        self.advice = Counter(
            "trainguard_advice", "Advice recorded, by the action it asks, the mode it was decided in, and who decided",
            ["action", "mode", "decided_by"], registry=r)
        self.actions = Counter(
            "trainguard_actions", "Action records (scheduler steps), by operation, status and mode "
            "(status intent is written before the scheduler is called; done/failed/skipped after)",
            ["operation", "status", "mode"], registry=r)
        self.outcomes = Counter(
            "trainguard_outcomes", "Closed advice generations, by disposition, who closed them and mode",
            ["disposition", "decided_by", "mode"], registry=r)
        self.watchdog = Counter(
            "trainguard_watchdog_fallbacks", "Watchdog interventions (deadline passed, step failed, leftover hold), "
            "by whether it released a hold of ours", ["released_hold"], registry=r)
        self.detection = Histogram(
            "trainguard_detection_latency_seconds", "From the initiating line read by the tailer to the anomaly "
            "recorded, by symptom (a hang's includes its hang timeout)", ["symptom"], buckets=DETECTION_BUCKETS,
            registry=r)
        self.decision = Histogram(
            "trainguard_decision_latency_seconds", "From an anomaly recorded to the advice recorded for it "
            "(attribution, policy, durable write)", buckets=DECISION_BUCKETS, registry=r)
        self.recovery = Histogram(
            "trainguard_recovery_duration_seconds", "From an advice recorded to its generation closed, by disposition",
            ["disposition"], buckets=RECOVERY_BUCKETS, registry=r)
        self.audit_write = Histogram(
            "trainguard_audit_write_seconds", "Duration of the store transaction that wrote an audit record, by kind",
            ["kind"], buckets=WRITE_BUCKETS, registry=r)
        self.scorecard_snapshots = Counter(
            "trainguard_scorecard_snapshots", "Scheduler snapshots written after Monitor-mode advice for the "
            "scorecard (docs/scorecard.md), by the job state seen (GONE: the scheduler forgot the job)",
            ["job_state"], registry=r)
        self.scorecard_watched = Gauge(
            "trainguard_scorecard_watched_workloads", "Workloads watched after a Monitor-mode advice", registry=r)
        self.unreadable = Gauge(
            "trainguard_unreadable_workloads", "Tracked workloads whose output cannot be read now (e.g. the "
            "process's descriptor limit, permissions): they are not monitored until it can", registry=r)
        self.actions_paused = Gauge(
            "trainguard_actions_paused", "1 while no recovery may change the scheduler: the runtime pause is set "
            "(trainguard actions pause, the API, the console or the trainguard-control ConfigMap) or the cluster "
            "switch is off (--mode monitor); 0 while both keys allow Action-mode policies to act", registry=r)
        self.breaker_trips = Counter(
            "trainguard_breaker_trips", "Times the blast-radius breaker opened because an administrator's cap "
            "(--max-actions-per-hour, --max-nodes-out, --max-nodes-out-share) refused an advice", registry=r)
        self.breaker_open = Gauge(
            "trainguard_breaker_open", "1 from the breaker opening seen by this process until a reset seen by it "
            "(trainguard_actions_paused, refreshed every sweep from the store, is 1 too while it is open)",
            registry=r)
        self.states = _WorkloadStates(self)
        r.register(self.states)
        self._anomaly_at: _Recent = _Recent()
        """(workload, attempt) -> time of its latest anomaly record not yet followed by advice."""
        self._advice: _Recent = _Recent()
        """(workload, attempt, generation) -> (time, mode) of an advice not yet closed."""
        for kind in vocab.AuditKind:
            self.audit_write.labels(kind.value)
        for symptom in (vocab.Symptom.CRASH, vocab.Symptom.HANG, vocab.Symptom.STRAGGLER):
            self.detection.labels(symptom.value)
        for disposition in vocab.Disposition:
            self.recovery.labels(disposition.value)
        for released in ("true", "false"):
            self.watchdog.labels(released)

    @classmethod
    def shared(cls, registry: CollectorRegistry) -> EngineMetrics:
        """The one ``EngineMetrics`` of ``registry``, created on first use."""
        found = _BY_REGISTRY.get(id(registry))
        if found is None or found.registry is not registry:
            found = cls(registry)
            _BY_REGISTRY[id(registry)] = found
        return found

    def scorecard_snapshot(self, job_state: str) -> None:
        """One snapshot written by the scorecard watch (``observe/scorecard_watch.py``)."""
        self.scorecard_snapshots.labels(job_state if job_state in _STATES or job_state == "GONE" else OTHER).inc()

    def count_workloads(self, source: Callable[[], Iterable[str]]) -> None:
        """Read ``trainguard_workloads`` from ``source`` (the current engine's job states) at scrape time."""
        self.states.source = source

    def stop_counting(self, source: Callable[[], Iterable[str]]) -> None:
        """``source``'s engine stopped (end of a leadership term): the gauge reads 0 until the next
        engine counts, instead of a stopped engine's stale table. A newer source is left alone."""
        if self.states.source == source:
            self.states.source = None

    # ------------------------------------------------------------------ the audit observer

    def audit_written(self, record: audit.Written) -> None:
        """One committed audit record -> the counters and histograms it moves."""
        kind = record.kind
        self.audit_write.labels(bounded(kind, _KINDS)).observe(max(record.write_s, 0.0))
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, record)

    def _on_anomaly(self, record: audit.Written) -> None:
        payload = record.payload
        self._anomaly_at.remember((record.workload, record.attempt), record.at)
        seen = payload.get("first_seen_at")
        if isinstance(seen, int | float):
            self.detection.labels(bounded(payload.get("symptom"), _SYMPTOMS)).observe(max(record.at - seen, 0.0))

    def _on_verdict(self, record: audit.Written) -> None:
        payload = record.payload
        self.anomalies.labels(bounded(payload.get("category"), _CATEGORIES),
                              bounded(payload.get("attribution"), _ATTRIBUTIONS)).inc()

    def _on_advice(self, record: audit.Written) -> None:
        payload = record.payload
        mode = bounded(payload.get("mode"), _MODES)
        self.advice.labels(bounded(payload.get("action"), _ADVICE_ACTIONS), mode,
                           bounded(record.decided_by, _DECIDERS)).inc()
        anomaly_at = self._anomaly_at.pop((record.workload, record.attempt), None)
        if anomaly_at is not None:
            self.decision.observe(max(record.at - anomaly_at, 0.0))
        self._advice.remember((record.workload, record.attempt, payload.get("generation")), (record.at, mode))

    def _on_action(self, record: audit.Written) -> None:
        payload = record.payload
        if payload.get("operation") == BREAKER_OPEN:
            self.breaker_trips.inc()
            self.breaker_open.set(1)
        elif payload.get("operation") == BREAKER_RESET:
            self.breaker_open.set(0)
        mode = self._mode_of(record)
        if mode == UNKNOWN_MODE and payload.get("error") == executor_mod.MONITOR_SKIP:
            mode = vocab.Mode.MONITOR.value
        self.actions.labels(bounded(payload.get("operation"), _OPERATIONS), bounded(payload.get("status"), _STATUSES),
                            mode).inc()

    def _on_outcome(self, record: audit.Written) -> None:
        payload = record.payload
        disposition = bounded(payload.get("disposition"), _DISPOSITIONS)
        opened = self._advice.pop((record.workload, record.attempt, payload.get("generation")), None)
        mode = opened[1] if opened is not None else UNKNOWN_MODE
        self.outcomes.labels(disposition, bounded(record.decided_by, _DECIDERS), mode).inc()
        if opened is not None:
            self.recovery.labels(disposition).observe(max(record.at - opened[0], 0.0))

    def _on_watchdog(self, record: audit.Written) -> None:
        self.watchdog.labels("true" if record.payload.get("released_hold") is True else "false").inc()

    def _mode_of(self, record: audit.Written) -> str:
        opened = self._advice.get((record.workload, record.attempt, record.payload.get("generation")))
        return str(opened[1]) if opened is not None else UNKNOWN_MODE


BREAKER_OPEN = "breaker-open"
"""``operation`` of the audit record written when the breaker opens (``AuditStore.reserve_limits``)."""
BREAKER_RESET = "breaker-reset"
"""``operation`` of the audit record written when a person resets it (CLI or API)."""
_KINDS = frozenset(k.value for k in vocab.AuditKind)
_HANDLERS: Final[dict[str, Callable[[EngineMetrics, audit.Written], None]]] = {
    vocab.AuditKind.ANOMALY.value: EngineMetrics._on_anomaly,
    vocab.AuditKind.VERDICT.value: EngineMetrics._on_verdict,
    vocab.AuditKind.ADVICE.value: EngineMetrics._on_advice,
    vocab.AuditKind.ACTION.value: EngineMetrics._on_action,
    vocab.AuditKind.OUTCOME.value: EngineMetrics._on_outcome,
    vocab.AuditKind.WATCHDOG.value: EngineMetrics._on_watchdog,
}
_BY_REGISTRY: weakref.WeakValueDictionary[int, EngineMetrics] = weakref.WeakValueDictionary()
"""One ``EngineMetrics`` per registry, by the registry's id: held weakly (an ``EngineMetrics`` holds
its registry, so a registry-keyed weak dict would keep both forever); while one is alive its
registry is too, so the id cannot be reused meanwhile. Never a global registry: tests and several
engines with their own health model do not collide."""


def exported_names(registry: CollectorRegistry) -> Iterator[str]:
    """Every sample name ``registry`` exports now (``_total``, ``_bucket``... included)."""
    for metric in registry.collect():
        for sample in metric.samples:
            yield sample.name
