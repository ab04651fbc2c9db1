"""The engine's journal recorder: the one object the engine calls at the few points a decision's
inputs are known (a scheduler snapshot, a checkpoint line, an attribution, a decision).

Place: between the engine and the store (``store.journal``). The journal is evidence for replays
and backtests, never a condition of recovery: a failed write is logged (once per change from
working to failing) and the loop goes on.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from trainguard.attribute import lemon
from trainguard.journal import entries
from trainguard.model import advice, anomalies, clock, routing, verdicts, workloads
from trainguard.model import evidence as evidence_model
from trainguard.policy import ledger
from trainguard.policy import model as policy_model
from trainguard.store import journal as journal_store

logger = logging.getLogger(__name__)

CHECKPOINT_EVERY_S = 60.0
"""Checkpoint samples are thinned to one per attempt per this many seconds."""
PROGRESS_EVERY_S = 60.0
"""Progress samples (the detector's progress lines) likewise."""
PENDING_MAX = 4096
"""Attributions kept in memory until their decision (a deferred decision may come much later)."""
BUFFER_MAX = 100_000
"""Buffered snapshots and samples kept at most between two flushes."""


class Recorder:
    """Writes journal entries; ``store`` None records nothing (a shell that turned it off)."""

    def __init__(self, store: journal_store.JournalStore | None, clock_: clock.Clock) -> None:
        self.store = store
        self.clock = clock_
        self._snapshots: dict[str, tuple[object, ...]] = {}
        self._checkpoints: dict[tuple[str, int], float] = {}
        self._progress: dict[tuple[str, int], float] = {}
        self._pending: collections.OrderedDict[int, tuple[verdicts.Verdict, entries.Attribution]] = (
            collections.OrderedDict())
        self._failing = False
        self._buffer: list[journal_store.Entry] = []
        """Snapshots and samples waiting for ``flush`` (one transaction per engine round: 10,000
        workloads first seen in one discovery round are one write, not 10,000)."""

    async def snapshot(self, job: workloads.JobSnapshot) -> None:
        """The scheduler's snapshot, when its state, attempt or placement changed."""
        key = (job.state, job.attempt, tuple(job.nodes), job.exit_code)
        if self._snapshots.get(job.workload) == key:
            return
        self._snapshots[job.workload] = key
        self._buffered(job.workload, job.attempt, entries.SNAPSHOT, self.clock.now(), entries.SnapshotEntry(job=job))

    async def checkpoint(self, workload: str, attempt: int, at: float) -> None:
        last = self._checkpoints.get((workload, attempt))
        if last is not None and at - last < CHECKPOINT_EVERY_S:
            return
        self._checkpoints[(workload, attempt)] = at
        self._buffered(workload, attempt, entries.CHECKPOINT, at, entries.CheckpointEntry(at=at))

    def progress_due(self, workload: str, attempt: int, sample: anomalies.Evidence) -> bool:
        """Whether ``sample`` (the detector's latest progress line) is due in the journal: the hot path
        asks this for every line, so it is a dictionary lookup."""
        if self.store is None or sample.at is None:
            return False
        last = self._progress.get((workload, attempt))
        return last is None or sample.at - last >= PROGRESS_EVERY_S

    async def progress(self, workload: str, attempt: int, sample: anomalies.Evidence) -> None:
        at = sample.at if sample.at is not None else self.clock.now()
        self._progress[(workload, attempt)] = at
        self._buffered(workload, attempt, entries.PROGRESS, at, entries.ProgressEntry(sample=sample))

    async def attributed(
        self, *, workload: str, attempt: int, at: float, policy: str, spec: policy_model.RecoveryPolicySpec,
        anomaly: anomalies.Anomaly, implications: Sequence[lemon.Implication], allocation: Sequence[str],
        job_nodes: Sequence[str], node_evidence: evidence_model.NodeEvidence, external: bool,
        verdict: verdicts.Verdict,
    ) -> None:
        if self.store is None:
            return
        item = entries.Attribution(
            workload=workload, attempt=attempt, at=at, policy=policy, spec=spec.model_dump(mode="json"),
            anomaly=anomaly, implications=list(implications), allocation=sorted(allocation),
            job_nodes=list(job_nodes), node_evidence=node_evidence, external=external, verdict=verdict,
        )
        self._pending[id(verdict)] = (verdict, item)
        while len(self._pending) > PENDING_MAX:
            self._pending.popitem(last=False)
        await self._write(workload, attempt, entries.VERDICT, at, entries.VerdictEntry(attribution=item))

    async def decided(
        self, *, verdict: verdicts.Verdict, at: float, job: workloads.JobSnapshot, history: ledger.WorkloadHistory,
        generation: int, partition_nodes: int | None, own_exclusions: Sequence[str], allocation: Sequence[str],
        route: routing.Route | None, item: advice.Advice, node_actions: Sequence[str] = ("drainNode",),
    ) -> None:
        if self.store is None:
            return
        found = self._pending.pop(id(verdict), None)
        if found is None or found[0] is not verdict:
            logger.warning("%s attempt %d: no recorded attribution for the decision; not journaled",
                           item.workload, item.attempt)
            return
        entry = entries.AdviceEntry(
            at=at, attribution=found[1], job=job, history=history, generation=generation,
            partition_nodes=partition_nodes, own_exclusions=list(own_exclusions), allocation=sorted(allocation),
            route=route, advice=item, node_actions=sorted(node_actions),
        )
        await self._write(item.workload, item.attempt, entries.ADVICE, at, entry)

    def forget(self, workload: str) -> None:
        """The workload is no longer tracked: drop what the recorder remembers of it."""
        self._snapshots.pop(workload, None)
        for key in [k for k in self._checkpoints if k[0] == workload]:
            del self._checkpoints[key]
        for key in [k for k in self._progress if k[0] == workload]:
            del self._progress[key]

    def _buffered(self, workload: str, attempt: int, kind: str, at: float, entry: BaseModel) -> None:
        if self.store is None:
            return
        if len(self._buffer) >= BUFFER_MAX:  # nobody flushes (a shell that runs no rounds): keep the newest
            del self._buffer[: BUFFER_MAX // 10]
        self._buffer.append((workload, attempt, kind, at, entry.model_dump(mode="json")))

    async def flush(self) -> None:
        """Write the buffered snapshots and samples (the engine calls it after each round)."""
        await self._store(self._take())

    def _take(self) -> list[journal_store.Entry]:
        taken, self._buffer = self._buffer, []
        return taken

    async def _write(self, workload: str, attempt: int, kind: str, at: float, entry: BaseModel) -> None:
        """A decision's entry: written now, after what is buffered (so the journal stays in order)."""
        payload: dict[str, Any] = entry.model_dump(mode="json")
        await self._store([*self._take(), (workload, attempt, kind, at, payload)])

    async def _store(self, items: list[journal_store.Entry]) -> None:
        if self.store is None or not items:
            return
        try:
            await self.store.append_many(items)
        except Exception as exc:  # evidence only: the journal must never stop a recovery
            if not self._failing:
                logger.warning("signal journal: cannot write (%s: %s); recovery goes on without it",
                               type(exc).__name__, exc)
            self._failing = True
            return
        if self._failing:
            logger.info("signal journal: writing again")
        self._failing = False
