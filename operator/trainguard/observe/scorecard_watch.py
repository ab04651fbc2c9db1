"""The scorecard's memory: after each Monitor-mode advice, what the scheduler shows is written down
whenever it changes, because the scheduler forgets (Slurm purges a finished job after ``MinJobAge``,
a drained node is resumed), and ``trainguard scorecard`` may run days later.

Place: an observer of the store (``AuditObserver``: told each committed advice record) plus one
timer round in the engine (``sweep``). It only reads the scheduler and writes snapshots; it never
acts. One ``list_nodes`` per round, one ``get_job`` per watched workload; a workload is watched for
``window_s`` after its advice, or until the scheduler forgets the job.
"""

from __future__ import annotations

import dataclasses
import logging

from trainguard.model import clock, vocab
from trainguard.observe import metrics as metrics_mod
from trainguard.schedulers import base
from trainguard.store import audit, snapshots

logger = logging.getLogger(__name__)

WINDOW_S = 3 * 24 * 3600.0
"""How long after a Monitor-mode advice its workload is watched."""
GONE = "GONE"
"""``job_state`` of the snapshot written when the scheduler no longer knows the job."""


@dataclasses.dataclass
class _Watched:
    workload: str
    attempt: int
    nodes: tuple[str, ...]
    until: float
    last: tuple[object, ...] | None = None


class ScorecardWatch:
    """Snapshots of the scheduler after Monitor-mode advice (store table ``scorecard_snapshots``)."""

    def __init__(self, scheduler: base.Scheduler, store: audit.AuditStore, clock_: clock.Clock, *,
                 window_s: float = WINDOW_S, metrics: metrics_mod.EngineMetrics | None = None) -> None:
        self.scheduler = scheduler
        self.store = store
        self.clock = clock_
        self.window_s = window_s
        self.snapshots = snapshots.Snapshots(store.sql_engine)
        self.watched: dict[str, _Watched] = {}
        self._loaded = False
        self.metrics = metrics
        """``trainguard_scorecard_snapshots_total`` and ``trainguard_scorecard_watched_workloads``."""

    def audit_written(self, record: audit.Written) -> None:
        """AuditObserver: start watching after a Monitor-mode advice (the latest advice of a workload wins)."""
        if record.kind == vocab.AuditKind.ADVICE.value and record.attempt is not None:
            self._watch(record.workload, record.attempt, record.payload, record.at)

    def _watch(self, workload: str, attempt: int, payload: dict[str, object], at: float) -> None:
        if payload.get("mode") != vocab.Mode.MONITOR.value:
            return
        blamed = [*_names(payload.get("exclude_nodes")), *_names(payload.get("drain_nodes"))]
        self.watched[workload] = _Watched(workload=workload, attempt=attempt, nodes=tuple(dict.fromkeys(blamed)),
                                          until=at + self.window_s)

    async def _load(self, now: float) -> None:
        """After a restart: watch again the Monitor-mode advice of the window whose job was not yet seen gone."""
        since = audit.to_datetime(now - self.window_s)
        live = dict(self.watched)  # advice seen since start wins over the recorded
        for record in await self.store.audit_records(kind=vocab.AuditKind.ADVICE, since=since):  # oldest first
            if record.attempt is not None:
                self._watch(record.workload, record.attempt, record.payload, audit.to_epoch(record.time))
        self.watched.update(live)
        seen = await self.snapshots.of(sorted(self.watched))
        for name, rows in seen.items():
            if rows and rows[-1].job_state == GONE:
                del self.watched[name]
        self._loaded = True

    async def sweep(self) -> None:
        """One round: snapshot every watched workload whose scheduler view changed."""
        now = self.clock.now()
        if not self._loaded:
            await self._load(now)
        for name in [n for n, w in self.watched.items() if w.until < now]:
            del self.watched[name]
        if self.metrics is not None:
            self.metrics.scorecard_watched.set(len(self.watched))
        if not self.watched:
            return
        nodes = {n.name: n for n in await self.scheduler.list_nodes()}
        for watched in list(self.watched.values()):
            job_id = await self.store.job_id_of(watched.workload)
            if job_id is None:
                continue
            node_view = {name: {"state": nodes[name].state, "reason": nodes[name].reason}
                         for name in watched.nodes if name in nodes}
            try:
                job = await self.scheduler.get_job(job_id)
            except base.JobGone:
                await self._write(watched, snapshots.Snapshot(
                    workload=watched.workload, attempt=watched.attempt, at=now, job_state=GONE, nodes=node_view))
                del self.watched[watched.workload]
                continue
            await self._write(watched, snapshots.Snapshot(
                workload=watched.workload, attempt=watched.attempt, at=now, job_state=job.state.value,
                restarts=job.attempt, excluded_nodes=tuple(job.excluded_nodes), job_nodes=tuple(job.nodes),
                nodes=node_view))

    async def _write(self, watched: _Watched, snap: snapshots.Snapshot) -> None:
        key = (snap.job_state, snap.restarts, snap.excluded_nodes, snap.job_nodes,
               tuple(sorted((k, v["state"], v["reason"]) for k, v in snap.nodes.items())))
        if key == watched.last:
            return
        await self.snapshots.record(snap)
        watched.last = key
        if self.metrics is not None:
            self.metrics.scorecard_snapshot(snap.job_state)


def _names(value: object) -> list[str]:
    return [str(n) for n in value] if isinstance(value, list | tuple) else []
