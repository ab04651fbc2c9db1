"""Job discovery: which opted-in jobs exist, and what changed since the last poll.

The engine calls ``JobDiscovery.poll()`` on a timer; each poll is one scheduler listing
(``Scheduler.list_jobs``: one ``squeue --json`` on Slurm) compared with what we tracked. The
comparison is the pure function ``compare`` so it is testable without a scheduler.

Identity of a run is (job id, restart count): a requeue keeps the job id and bumps
``attempt``, and shows up as ``changed`` (the engine starts a new attempt: new tailer
position, new hang clock). A finished job is reported once per attempt in ``finished`` and
kept until the engine calls ``forget(job_id)`` (its outcome is recorded); Slurm keeps listing
it for ``MinJobAge``, and a forgotten run is never reported again unless it is requeued. A
tracked job that disappears from the listing (purged, or its comment no longer opts in)
is ``gone``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from trainguard.model import clock as clock_mod
from trainguard.model import workloads


class JobLister(Protocol):
    """The part of ``schedulers.base.Scheduler`` discovery needs (signals must not import schedulers)."""

    async def list_jobs(self) -> list[workloads.JobSnapshot]: ...


@dataclass(frozen=True, slots=True)
class DiscoveryDelta:
    """What one poll found. A job may be in ``new`` and ``finished`` at once (first seen finished)."""

    at: float
    new: tuple[workloads.JobSnapshot, ...] = ()
    changed: tuple[workloads.JobSnapshot, ...] = ()
    finished: tuple[workloads.JobSnapshot, ...] = ()
    gone: tuple[workloads.JobSnapshot, ...] = ()
    restarted: tuple[workloads.JobSnapshot, ...] = ()
    """Subset of ``changed`` whose attempt went up (a requeue: a new run of the same job)."""

    @property
    def empty(self) -> bool:
        return not (self.new or self.changed or self.finished or self.gone)


@dataclass(slots=True)
class Tracked:
    """What discovery remembers about one job."""

    snapshot: workloads.JobSnapshot
    first_seen: float
    finished_reported: bool = False


@dataclass(slots=True)
class DiscoveryState:
    """All of discovery's memory; plain data so the engine could persist it."""

    jobs: dict[str, Tracked] = field(default_factory=dict)
    forgotten: dict[str, tuple[int, str]] = field(default_factory=dict)
    """job id -> (attempt, incarnation) that was forgotten; that run stays silent while Slurm still
    lists it. Another object under the same id (``JobSnapshot.incarnation``, where known) is a new
    job, whatever its attempt."""


def _differs(a: workloads.JobSnapshot, b: workloads.JobSnapshot) -> bool:
    return (a.state, a.attempt, a.nodes, a.incarnation) != (b.state, b.attempt, b.nodes, b.incarnation)


def compare(state: DiscoveryState, listing: Iterable[workloads.JobSnapshot], now: float) -> DiscoveryDelta:
    """Fold one listing into ``state`` (mutated) and return the differences."""
    current: dict[str, workloads.JobSnapshot] = {}
    for snap in listing:
        current[snap.job_id] = snap
    new: list[workloads.JobSnapshot] = []
    changed: list[workloads.JobSnapshot] = []
    restarted: list[workloads.JobSnapshot] = []
    finished: list[workloads.JobSnapshot] = []
    for job_id, snap in current.items():
        forgotten = state.forgotten.get(job_id)
        if forgotten is not None:
            attempt, was = forgotten
            if snap.attempt <= attempt and not (was and snap.incarnation and snap.incarnation != was):
                continue
            del state.forgotten[job_id]  # requeued after we let go, or a new object: a new run to follow
        tracked = state.jobs.get(job_id)
        if tracked is None:
            tracked = state.jobs[job_id] = Tracked(snap, now)
            new.append(snap)
        else:
            before = tracked.snapshot
            tracked.snapshot = snap
            if _differs(before, snap):
                changed.append(snap)
                if snap.attempt > before.attempt:
                    restarted.append(snap)
                    tracked.finished_reported = False
        if snap.state.finished and not tracked.finished_reported:
            tracked.finished_reported = True
            finished.append(snap)
        elif not snap.state.finished:
            tracked.finished_reported = False
    gone = [state.jobs.pop(job_id).snapshot for job_id in list(state.jobs) if job_id not in current]
    for job_id in list(state.forgotten):
        if job_id not in current:
            del state.forgotten[job_id]
    return DiscoveryDelta(now, tuple(new), tuple(changed), tuple(finished), tuple(gone), tuple(restarted))


class JobDiscovery:
    """Polls a scheduler for opted-in jobs and reports deltas to the engine."""

    def __init__(self, scheduler: JobLister, clock: clock_mod.Clock) -> None:
        self._scheduler = scheduler
        self._clock = clock
        self.state = DiscoveryState()

    async def poll(self) -> DiscoveryDelta:
        """One listing; scheduler errors propagate and leave the tracked state untouched."""
        listing = await self._scheduler.list_jobs()
        return compare(self.state, listing, self._clock.now())

    def forget(self, job_id: str) -> None:
        """The engine recorded this job's outcome: stop reporting the current run."""
        tracked = self.state.jobs.pop(job_id, None)
        if tracked is not None:
            self.state.forgotten[job_id] = (tracked.snapshot.attempt, tracked.snapshot.incarnation)

    def retry(self, job_id: str) -> None:
        """The engine could not start tracking this job (e.g. the store timed out): report it as new
        again at the next poll, instead of keeping it as known and never tracked."""
        self.state.jobs.pop(job_id, None)

    @property
    def tracked(self) -> Mapping[str, workloads.JobSnapshot]:
        return {job_id: t.snapshot for job_id, t in self.state.jobs.items()}
