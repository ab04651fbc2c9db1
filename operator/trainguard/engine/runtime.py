"""What the engine keeps per tracked workload, and how its records reach the shells.

Place: the bottom of the engine package; every step module (tracking, tailing, decision,
recovery, ...) reads and writes the same ``WorkloadRuntime`` objects, kept in one table
(``Engine.runtimes``) that the facade creates and hands to each step. Nothing here calls the
scheduler or the store.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from trainguard.detect import matcher as matcher_mod
from trainguard.detect import stream
from trainguard.model import advice as advice_mod
from trainguard.model import anomalies, clock, routing, user_regex, verdicts, vocab, workloads
from trainguard.policy import ledger
from trainguard.policy import model as policy_model
from trainguard.signals import sources, tailbook, tailer

LOGGER_NAME = "trainguard.engine"
"""The one logger of the engine's modules: its lines keep the name they had before the package split
(log filters and the JSON ``logger`` field select on it)."""

logger = logging.getLogger(LOGGER_NAME)

Listener = Callable[[str, str, dict[str, object]], Awaitable[None]]
"""Called as ``listener(kind, workload, payload)`` after each audit record the engine writes:
the seam for Kubernetes status/Events, the console and metrics."""

FAILED_STATES = frozenset(
    {
        workloads.JobState.FAILED,
        workloads.JobState.NODE_FAIL,
        workloads.JobState.OUT_OF_MEMORY,
        workloads.JobState.TIMEOUT,
        workloads.JobState.BOOT_FAIL,
    }
)
"""Endings whose exit the detector judges (``WorkloadDetector.on_exit``)."""

Deferred = tuple[anomalies.Anomaly, verdicts.Verdict, int]
"""A decision waiting for the recovery in flight: the anomaly, its verdict and the attempt."""


@dataclass
class DecisionMemory:
    """What the decision remembers about a workload's attempts between two anomalies: which attempts
    were advised on, which were somebody else's, what waits. Read and written by the decision and the
    recovery runner only; the shells read the rest of ``WorkloadRuntime``."""

    advised: dict[int, str] = field(default_factory=dict)
    """Attempt -> the attribution of the advice given on it (``vocab.Attribution`` value; ``none`` for
    an advice that asked for nothing). One advice per attempt unless a stronger attribution comes
    (``decision.stronger``)."""
    deferred: collections.deque[Deferred] = field(default_factory=collections.deque)
    """Decisions waiting for the recovery in flight (``WorkloadRuntime.task``) to finish."""
    awaiting_metrics: bool = False
    """A crash's decision waits for the GPU metrics (``Decision.after_metrics``): like a deferred
    decision, its lines must be read again after a restart, so read positions are not saved."""
    not_ours: set[int] = field(default_factory=set)
    """Attempts somebody else's decision ended (``act.whose``), recorded once each, never acted on."""
    metric_faults: dict[int, set[tuple[str, str, int | None, float]]] = field(default_factory=dict)
    """Attempt -> GPU-metric faults already raised as anomalies (each one once)."""
    last_anomaly: anomalies.Anomaly | None = None
    last_verdict: verdicts.Verdict | None = None


@dataclass
class WorkloadRuntime:
    """What the engine keeps for one tracked workload: its job, its effective policy, its detection,
    its recovery task and the recent records the shells show."""

    workload: str
    job: workloads.JobSnapshot
    policy_name: str
    spec: policy_model.RecoveryPolicySpec | None
    """The effective policy; None when no policy covers the job (recorded, never acted on)."""
    detector: stream.WorkloadDetector | None
    book: sources.LogBook
    """The job's output (files or a log store): how far detection got, where the attempt starts."""
    history: ledger.WorkloadHistory
    checkpoint_re: user_regex.UserRegex | None
    matcher: matcher_mod.Matcher | None
    detector_attempt: int = -1
    task: asyncio.Task[None] | None = None
    """The workload's recovery in flight (``recovery.RecoveryRunner``), or the wait for GPU metrics."""
    ready: bool = False
    """Tracking has started (its files are placed): the tailing round may read them."""
    closed: bool = False
    """Tracking has stopped (``Tracking.close``). A tailing round that began before keeps this
    object in its list across its awaits: it must neither feed it nor save its read positions, which
    would land under the workload id after a new object under that id retired the old history."""
    finished_at: float | None = None
    opt_in_errors: list[str] = field(default_factory=list)
    last_advice: advice_mod.Advice | None = None
    disposition: vocab.Disposition | None = None
    route: routing.Route | None = None
    """How the workload was routed to ``policy_name`` (recorded with every advice)."""
    recent: collections.deque[dict[str, object]] = field(default_factory=lambda: collections.deque(maxlen=20))
    """The latest audit records of this workload (kind, time, summary), newest last: the view
    that Kubernetes status and the console show; the audit store stays the durable log."""
    unwatched: int | None = None
    """The attempt first seen already ended with no history of ours (it ended before we watched):
    recorded as such and never judged or acted on (``Tracking.unwatched``). A later attempt is watched."""
    memory: DecisionMemory = field(default_factory=DecisionMemory)

    @property
    def tailers(self) -> list[tailer.LogTailer]:
        return [f.tailer for f in self.book.files if isinstance(f, tailbook.Followed)]


Runtimes = dict[str, WorkloadRuntime]
"""Workload -> its runtime, in the scheduler's order: the one table every step shares."""


class Reporter:
    """Hands each record the engine writes to the listeners (the shells' seam), and keeps the last
    ones on the runtime (``WorkloadRuntime.recent``). A failing listener is logged, never raised:
    a status write must not stop a recovery."""

    def __init__(self, clock_: clock.Clock, listeners: Sequence[Listener] = ()) -> None:
        self.clock = clock_
        self.listeners = list(listeners)

    async def notify(self, rt: WorkloadRuntime, kind: str, payload: dict[str, object]) -> None:
        rt.recent.append({"kind": kind, "at": self.clock.now(), "payload": payload})
        for listener in self.listeners:
            try:
                await listener(kind, rt.workload, payload)
            except Exception:
                logger.exception("listener failed on %s %s", kind, rt.workload)


def has_run(job: workloads.JobSnapshot) -> bool:
    """Whether the job's current attempt has started (so its output file may hold its lines).

    Pending and requeued (``PENDING+COMPLETING`` included) mean the current attempt has not
    started yet: what the file holds belongs to earlier attempts.
    """
    return job.state not in (workloads.JobState.PENDING, workloads.JobState.REQUEUED)


def tasks_per_node(job: workloads.JobSnapshot) -> int | None:
    """The rank layout: even tasks per node, or one per node when the scheduler did not say."""
    if job.num_tasks is None:
        return 1 if job.nodes else None
    return job.tasks_per_node


E = TypeVar("E", bound=enum.Enum)


def stored_enum(kind: type[E], value: str | None) -> E | None:
    """A stored enum value, or None when absent or no longer known (a value of a newer release)."""
    if value is None:
        return None
    try:
        return kind(value)
    except ValueError:
        return None
