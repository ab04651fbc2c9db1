"""Where reading a workload's output starts, and the saved read positions a restart resumes from.

Place: a step module of the engine, used by tracking (a job first seen, a new attempt, moved
output files), tailing (the routine saves) and the decision (positions saved with each advice).
Each attempt's lines are judged on that attempt only: on first sight the stored positions
(``signals.resume``) keep earlier attempts' lines away, and a position is saved only once the
lines behind it can no longer be needed by a decision (a restart reads them again otherwise).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence

from trainguard.engine import runtime
from trainguard.model import clock, workloads
from trainguard.signals import positions, resume, sources, tailbook
from trainguard.store import audit

logger = runtime.logger


class Placement:
    """Places each workload's reading at its attempt's start and stores how far it got."""

    def __init__(self, store: audit.AuditStore, clock_: clock.Clock, *, started_second: int) -> None:
        self.store = store
        self.clock = clock_
        self.started_second = started_second
        """When this engine started, to the whole second (``core.Engine.started_second``)."""

    async def open(self, rt: runtime.WorkloadRuntime, resume_from: Sequence[audit.TailRecord] | None = None) -> None:
        """Follow the job's output files, each from where its current attempt's lines start.

        ``resume_from`` (the stored positions, on first sight of the job in this process) makes
        a restart continue exactly where detection stopped, and keeps lines of earlier attempts
        away from the current one (``signals.resume``). Without it (paths changed) files are
        read from their start.
        """
        paths = [(rt.job.stdout_path, "stdout"), (rt.job.stderr_path, "stderr")]
        seen: set[str] = set()
        for path, source in paths:
            if path and path not in seen and path != "/dev/null":
                seen.add(path)
                start = None
                if resume_from is not None:
                    start = await self.attempt_start(rt, path, [r for r in resume_from if r.path == path])
                rt.book.add(path, source, start)
        if resume_from is not None:
            await self.save([rt], force=True)

    async def attempt_start(
        self, rt: runtime.WorkloadRuntime, path: str, stored: Sequence[audit.TailRecord]
    ) -> resume.Start | None:
        """Where the current attempt's lines start in ``path`` (first sight of the job); None = from 0."""
        job = rt.job
        mine = [r for r in stored if r.attempt == job.attempt]
        earlier = [r for r in stored if r.attempt < job.attempt]
        if rt.book.kind != sources.FILES:  # a log store: the source knows its own attempt boundaries
            return rt.book.attempt_start(path, attempt=job.attempt,
                                         running=runtime.has_run(job) and rt.spec is not None,
                                         started_at=job.started_at, mine=[position(r) for r in mine],
                                         earlier=[position(r) for r in earlier])
        if rt.spec is None:  # never judged while no policy covers it: just note where the file ends
            return await rt.book.run(lambda: resume.pending_start(path))
        if not runtime.has_run(job):
            # Pending or requeued: the file holds earlier attempts' lines only; they are not read.
            found = await rt.book.run(lambda: resume.pending_start(path))
            if found is not None:
                unread = found.position.offset - earlier[-1].offset if earlier else 0
                logger.info("%s attempt %d has not started: its output in %s starts after byte %d%s", rt.workload,
                            job.attempt, path, found.position.offset,
                            f"; the {unread} bytes before belong to earlier attempts and are not judged again"
                            if unread > 0 else "")
            return found
        if mine:
            row = mine[-1]
            logger.info("%s attempt %d: resuming %s at byte %d (saved position)", rt.workload, job.attempt, path,
                        row.offset)
            return resume.Start(position(row), row.basis or "stored")  # keep how its start was found
        if job.attempt == 0 and job.started_at is None and not earlier:
            return resume.Start(positions.TailPosition(path, None, 0, 0), "first_attempt")
        previous = position(earlier[-1]) if earlier else None
        previous_is_last = bool(earlier) and earlier[-1].attempt == job.attempt - 1
        now = self.clock.now()
        found = await rt.book.run(lambda: resume.running_start(
            path, started_at=job.started_at, previous=previous, previous_is_last=previous_is_last, now=now))
        if found is None:
            return None
        if found.basis == "unknown" and not earlier and self.first_run_watched(job):
            # The job's first run started while we were watching and was listed a moment later:
            # the file has no earlier attempt of this job, and it was not written before the start
            # by this job. (A file shared with an older job is told apart by mtime or timestamps.)
            found = resume.Start(positions.TailPosition(path, None, 0, 0), "first_attempt")
        level = logging.WARNING if found.basis == "unknown" and found.skipped else logging.INFO
        logger.log(level, "%s attempt %d: reading %s %s", rt.workload, job.attempt, path, found.describe())
        return found

    def first_run_watched(self, job: workloads.JobSnapshot) -> bool:
        """The job's first run (attempt 0) started while this engine was running: its output file
        holds nothing of an earlier attempt of the job."""
        return job.attempt == 0 and job.started_at is not None and job.started_at >= self.started_second

    async def at_attempt_start(self, rt: runtime.WorkloadRuntime, job: workloads.JobSnapshot) -> None:
        """The attempt runs, first seen waiting: its output starts where the files ended before it started.

        A job's first run that started while we watched, whose every look came after its start
        (the listing said PENDING, the file was looked at a moment later, the job had begun
        printing in between), is placed as first sight of a running first attempt is: from the
        file itself (mtime, timestamps), else from byte 0. Skipping to our first look would drop
        the attempt's first lines, e.g. an Xid printed at once."""
        for f, placed in rt.book.place_at_start(job.started_at):
            how = placed
            if isinstance(f, tailbook.Followed) and f.basis == "unknown" and self.first_run_watched(job):
                found = await rt.book.run(functools.partial(
                    resume.running_start, f.path, started_at=job.started_at, previous=None, previous_is_last=False,
                    now=self.clock.now()))
                if found is not None:
                    if found.basis == "unknown":
                        found = resume.Start(positions.TailPosition(f.path, None, 0, 0), "first_attempt")
                    f.tailer.skip_to(found.position)
                    f.consumed, f.basis = found.position, found.basis
                    how = f"{f.path} {found.describe()} (every look came after the start of the first run)"
            logger.info("%s attempt %d: reading %s", rt.workload, job.attempt, how)

    async def save(self, runtimes: Sequence[runtime.WorkloadRuntime], *, force: bool = False) -> None:
        """Store the read positions that moved (one transaction for all), as a restart needs them.

        A workload is skipped while a crash window is open or a decision waits (``force``
        aside): its lines are in the detector's memory only, and a restart must read them again.
        """
        records: list[audit.TailRecord] = []
        changed: list[tuple[runtime.WorkloadRuntime, list[sources.Followed]]] = []
        for rt in runtimes:
            if rt.spec is None or rt.closed:
                continue  # never judged, or no longer tracked: nothing to resume
            if not force and (rt.memory.deferred or rt.memory.awaiting_metrics
                              or (rt.detector is not None and rt.detector.settling)):
                continue
            files = rt.book.unsaved() if not force else [f for f in rt.book.files if f.consumed is not None]
            if files:
                records += tail_records(rt, files)
                changed.append((rt, files))
        if not records:
            return
        await self.store.save_tail_positions(records, at=self.clock.now())
        for rt, files in changed:
            rt.book.mark_saved(files)


def tail_records(rt: runtime.WorkloadRuntime, files: Sequence[sources.Followed]) -> list[audit.TailRecord]:
    """The consumed positions of ``files``, as rows of the attempt their lines belong to."""
    attempt = rt.detector_attempt if rt.detector is not None else rt.job.attempt
    return [
        audit.TailRecord(workload=rt.workload, attempt=attempt, path=f.path, source=f.source,
                         inode=f.consumed.inode, offset=f.consumed.offset, lineno=f.consumed.lineno,
                         fingerprint=f.consumed.fingerprint, basis=f.basis)
        for f in files if f.consumed is not None
    ]


def position(row: audit.TailRecord) -> positions.TailPosition:
    return positions.TailPosition(row.path, row.inode, row.offset, row.lineno, row.fingerprint)
