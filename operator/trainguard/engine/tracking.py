"""Tracking: which workloads the engine follows, and each one's life from the scheduler's listings.

Place: the top step module of the engine, run by the facade's discovery timer. Each discovery
round starts tracking new opted-in jobs (their policy, their history from an earlier run, where
their output starts), follows every change the scheduler reports (a new attempt, an ending, a
hold, a new object under a known id) and stops tracking what finished or left this replica's shards.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from trainguard import settings as settings_mod
from trainguard import shards as shards_mod
from trainguard.act import whose
from trainguard.detect import hosts
from trainguard.engine import decision as decision_mod
from trainguard.engine import placement as placement_mod
from trainguard.engine import policies as policies_mod
from trainguard.engine import recovery, restore, runtime, tailing, theirs
from trainguard.journal import recorder as journal_mod
from trainguard.model import clock, user_regex, workloads
from trainguard.policy import ledger, overrides
from trainguard.schedulers import base
from trainguard.signals import discovery, fileio, sources
from trainguard.store import audit

logger = runtime.logger

TRACK_BATCH = 512
"""New jobs tracked concurrently in one discovery round (``Tracking.track_all``)."""


class Tracking:
    """Follows the scheduler's opted-in jobs, one ``WorkloadRuntime`` each."""

    def __init__(
        self, scheduler: base.Scheduler, store: audit.AuditStore, clock_: clock.Clock, *,
        settings: settings_mod.EngineSettings, runtimes: runtime.Runtimes, journal: journal_mod.Recorder,
        log_books: sources.BookFactory, file_pool: fileio.FilePool, shards: shards_mod.Ownership | None,
        started_second: int, policies: policies_mod.PolicyResolver, restore_: restore.Restore,
        placement: placement_mod.Placement, tailing_: tailing.Tailing, decision: decision_mod.Decision,
        theirs_: theirs.Theirs, runner: recovery.RecoveryRunner,
    ) -> None:
        self.scheduler = scheduler
        self.store = store
        self.clock = clock_
        self.settings = settings
        self.runtimes = runtimes
        self.journal = journal
        self.log_books = log_books
        """Makes each workload's book: the log source of this installation (``signals.sources``)."""
        self.file_pool = file_pool
        self.shards = shards
        self.started_second = started_second
        self.policies = policies
        self.restore = restore_
        self.placement = placement
        self.tailing = tailing_
        self.decision = decision
        self.theirs = theirs_
        self.runner = runner
        self.discovery = discovery.JobDiscovery(
            scheduler if shards is None else shards_mod.OwnedLister(scheduler, shards), clock_)
        self.discovered = False
        """Whether a discovery round has completed: a job first seen ended in the first round had
        ended before this engine could watch it (``unwatched``)."""

    async def discover(self) -> None:
        """One discovery round: start tracking new jobs, follow requeues, settle finished jobs."""
        delta = await self.discovery.poll()
        await self.track_all(delta.new)
        endings: dict[str, tuple[runtime.WorkloadRuntime, list[workloads.JobSnapshot]]] = {}
        for job in (*delta.changed, *delta.finished):  # a job that changed to finished is in both
            if job.workload in endings:
                endings[job.workload][1].append(job)  # in order, after the ending it follows
                continue
            rt = self.runtimes.get(job.workload)
            if rt is not None and job.incarnation and rt.job.incarnation and job.incarnation != rt.job.incarnation:
                await self.drop_incarnation(rt)
                rt = None
            if rt is None:
                await self.track_all([job])
                continue
            if job.state.finished and self.tailing.reads_a_store(rt):
                endings[job.workload] = (rt, [job])  # may wait for the store's last rows: beside the others
                continue
            await self.update(rt, job)
        await self.update_ended(list(endings.values()))
        for job in delta.gone:
            rt = self.runtimes.pop(job.workload, None)
            if rt is not None and self.shards is not None and not self.shards.owns(job.workload):
                if rt.task is not None and self.runner.busy(rt):
                    rt.task.cancel()  # fenced anyway; the shard's new holder resumes it
                await self.close(rt, "its shard is no longer held by this replica")
            elif rt is not None:
                if rt.job.incarnation and not rt.job.state.finished and rt.spec is not None:
                    # A Kubernetes object gone before it finished: someone deleted it. Theirs; recorded.
                    await self.theirs.record(rt, rt.job, rt.job.attempt, whose.Change(
                        whose.PERSON, "deleted", f"the {rt.job.name or 'workload'} object was deleted"))
                await self.close(rt, "the scheduler no longer knows the job")
        await self.runner.take_over()
        await self.forget_settled()
        await self.journal.flush()
        self.discovered = True

    async def update_ended(
        self, endings: Sequence[tuple[runtime.WorkloadRuntime, Sequence[workloads.JobSnapshot]]],
    ) -> None:
        """``update`` of the jobs that ended this round and read a log store, all at once: each may
        wait up to ``log_store_lag_s`` for its last rows (``Tailing.await_store_lines``), and a
        hundred jobs failing together (a switch, a bad rack) must not wait a hundred times that in
        turn, holding discovery back meanwhile. One job's error does not stop the others; the first
        is raised once all are done."""
        failed: BaseException | None = None
        for start in range(0, len(endings), TRACK_BATCH):
            chunk = endings[start:start + TRACK_BATCH]
            results = await asyncio.gather(*(self.update_each(rt, jobs) for rt, jobs in chunk),
                                           return_exceptions=True)
            failed = failed or next((r for r in results if isinstance(r, BaseException)), None)
        if failed is not None:
            raise failed

    async def update_each(self, rt: runtime.WorkloadRuntime, jobs: Sequence[workloads.JobSnapshot]) -> None:
        for job in jobs:
            await self.update(rt, job)

    async def track_all(self, jobs: Sequence[workloads.JobSnapshot]) -> None:
        """Start tracking new jobs, up to ``TRACK_BATCH`` at once: their store writes share commits
        (``AuditStore.grouped``) and their files are looked at in parallel on the pool, so that a
        thousand new jobs take a few commits instead of thousands. A job whose tracking fails
        does not keep the others from being tracked; the round then fails with its error, and the
        job is new again in the next round (never left known to discovery but untracked). The
        table keeps the scheduler's order."""
        failed: BaseException | None = None
        known = await self.store.known_workloads([job.workload for job in jobs]) if jobs else set()
        chunk: list[workloads.JobSnapshot] = []
        for index, job in enumerate(jobs):
            chunk.append(job)
            following = jobs[index + 1] if index + 1 < len(jobs) else None
            if (following is not None and len(chunk) < TRACK_BATCH
                    and following.workload not in {j.workload for j in chunk}):
                continue
            # What the store knows of the chunk's known workloads, read once for all of them
            # (history and read positions: four queries per 500, not four per workload).
            ours = [j.workload for j in chunk if j.workload in known]
            facts = await self.store.attempt_facts_many(ours) if ours else {}
            tails = await self.store.tail_positions_many(ours) if ours else {}
            results = await asyncio.gather(*(self.track(j, known=j.workload in known, stored=audit.Stored(
                facts.get(j.workload, []), tails.get(j.workload, []))) for j in chunk), return_exceptions=True)
            for j, result in zip(chunk, results, strict=True):
                rt = self.runtimes.pop(j.workload, None)
                if isinstance(result, BaseException):
                    failed = failed or result
                    if rt is not None:
                        rt.book.close()
                    self.discovery.retry(j.job_id)  # new again next round: never known but untracked
                elif rt is not None:
                    self.runtimes[j.workload] = rt
            chunk = []
        if failed is not None:
            raise failed

    async def track(self, job: workloads.JobSnapshot, *, known: bool, stored: audit.Stored) -> None:
        """Start tracking ``job``. ``known=False``: the store had no row for it (``track_all``), so
        there is no history or read position to read back; ``stored``: its history and positions, read
        by ``track_all`` for its whole chunk at once."""
        now = self.clock.now()
        opt_in = overrides.parse_opt_in(job.comment)
        if opt_in is None:  # discovery lists only opted-in jobs; never touch anything else
            return
        spec, errors, route = self.policies.effective(job, opt_in)
        name = route.policy or opt_in.policy_name or ""
        if known and await self.restore.retire_incarnation(job, now):
            # Deleted and created again under the same name: a new job, whose history is not the
            # old one's (that continues under the retired id).
            known = False
        with self.store.grouped():  # shares a commit with the other new jobs of this round
            await self.store.upsert_workload(
                workload=job.workload, scheduler=self.scheduler.name, job_id=job.job_id, at=now, policy=name,
                comment=job.comment[:1024], opt_in_errors=errors, state=job.state.value, incarnation=job.incarnation,
            )
        if errors:
            logger.warning("workload %s: %s", job.workload, "; ".join(errors))
        matcher = self.policies.matcher_for(spec) if spec is not None else None
        checkpoint = user_regex.compile(spec.detection.checkpoint_regex) if spec is not None else None
        rt = runtime.WorkloadRuntime(
            workload=job.workload, job=job, policy_name=name, spec=spec, detector=None,
            book=self.log_books(job.workload, job.job_id, self.clock, self.file_pool),
            history=ledger.WorkloadHistory(workload=job.workload), checkpoint_re=checkpoint, matcher=matcher,
            opt_in_errors=errors, route=route,
        )
        if known:
            await self.restore.history(rt, stored.facts)
            rt.job = job = await self.restore.floor_attempt(job, rt.history)
        elif spec is not None and self.unwatched(job):
            rt.unwatched = job.attempt
            await self.theirs.record_unwatched(rt, job)
        self.runtimes[job.workload] = rt
        logger.info("tracking %s (job %s, attempt %d, %s, policy %s%s: %s)", job.workload, job.job_id, job.attempt,
                    job.state.value, name or "-", f", mode {spec.mode.value}" if spec else ", NOT COVERED",
                    route.reason)
        resume_from = list(stored.tails) if known else []
        with self.store.grouped():
            await self.placement.open(rt, resume_from=resume_from)
        await self.update(rt, job, first=True)
        rt.ready = True

    def unwatched(self, job: workloads.JobSnapshot) -> bool:
        """Whether ``job``, first seen with no history in the store, had already ended before this engine
        could watch it: it ended before we started, or it is listed ended in our first discovery round
        without an end time. Nobody watched that failure; a person may have resubmitted the job since,
        or decided not to. It is recorded and never acted on (in both modes). A job that ended after
        we started (between two listings) was watched and is judged as usual."""
        if not job.state.finished:
            return False
        if job.ended_at is not None:
            return job.ended_at < self.started_second
        return not self.discovered

    async def update(self, rt: runtime.WorkloadRuntime, job: workloads.JobSnapshot, *, first: bool = False) -> None:
        """A fresh snapshot of a tracked job."""
        now = self.clock.now()
        previous = rt.job
        rt.job = job
        await self.journal.snapshot(job)
        if job.stdout_path != previous.stdout_path or job.stderr_path != previous.stderr_path:
            rt.book.close()
            rt.book = self.log_books(rt.workload, job.job_id, self.clock, self.file_pool)
            await self.placement.open(rt)
        # A new attempt gets a new detector once it runs: until then, lines still arriving from the
        # old attempt's teardown (slurmstepd "CANCELLED ... DUE TO JOB REQUEUE") go to the old one.
        # An attempt first seen already failed (it started and died between two listings) gets its
        # own detector too, so its exit state is judged.
        if rt.unwatched is not None and job.attempt > rt.unwatched:
            rt.unwatched = None  # requeued since (by a person): this attempt is watched from its start
        ran = job.state == workloads.JobState.RUNNING or job.state in runtime.FAILED_STATES
        if rt.unwatched is not None:
            pass  # ended before we watched: its output is not judged
        elif (rt.detector is None and runtime.has_run(job)) or (
            rt.detector is not None and job.attempt > rt.detector_attempt and ran
        ):
            if rt.detector is not None:
                await self.tailing.drain(rt)
                rt.book.set_basis("observed")  # we read up to the attempt's start ourselves
                rt.book.attempt_replaced(now)  # what arrives later from before now is the old attempt's
                await self.tailing.conclude_replaced(rt, job)
            elif rt.spec is not None:
                await self.placement.at_attempt_start(rt, job)
            self.tailing.new_detector(rt, job)
            with self.store.grouped() if first else contextlib.nullcontext():  # see track_all
                if rt.detector is not None:
                    await self.placement.save([rt], force=True)  # where this attempt's lines start
                await self.store.record_attempt(workload=rt.workload, attempt=job.attempt, at=now,
                                                started_at=now, state=job.state.value)
            rt.finished_at = None
        elif not first and job.state != previous.state:
            await self.store.record_attempt(workload=rt.workload, attempt=job.attempt, at=now, state=job.state.value)
        if not first and job.attempt > previous.attempt and not previous.state.finished:
            # Requeued (by us, a person or Slurm) before we saw the old attempt end: it ended now.
            await self.store.record_attempt(workload=rt.workload, attempt=previous.attempt, at=now, ended_at=now,
                                            state=workloads.JobState.REQUEUED.value)
        if not first and job.attempt > previous.attempt and rt.spec is not None:
            await self.theirs.note_ending(rt, job, previous.attempt)  # a person's requeue is theirs
        if not first and job.held and not previous.held and not job.state.finished and rt.spec is not None:
            await self.theirs.note_ending(rt, job, job.attempt)  # a person's hold or suspend is theirs
        if not first and (job.state != previous.state or job.attempt != previous.attempt):
            await self.store.set_workload_state(rt.workload, job.state.value, at=now)
        if rt.detector is not None and rt.detector.attempt == job.attempt and job.nodes and job.nodes != previous.nodes:
            # First seen pending: the rank -> node layout exists only once the job runs.
            rt.detector.rank_map = hosts.RankMap(job.nodes, runtime.tasks_per_node(job))
        with self.store.grouped() if first else contextlib.nullcontext():  # see track_all
            await self.remember_allocation(rt, job, previous, first=first)
        if job.state.finished and (first or not previous.state.finished):
            if rt.spec is not None and rt.unwatched is None:
                await self.theirs.note_ending(rt, job, job.attempt)  # a person's cancel, the time limit: theirs
            await self.tailing.drain(rt)
            rt.finished_at = now
            rt.history = ledger.record_attempt_end(rt.history, job.attempt, now)
            await self.store.record_attempt(workload=rt.workload, attempt=job.attempt, at=now, ended_at=now,
                                            state=job.state.value)
            if (rt.detector is not None and rt.detector.attempt == job.attempt
                    and job.state in runtime.FAILED_STATES):
                await self.tailing.await_store_lines(rt)
                for anomaly in rt.detector.on_exit(job):
                    await self.decision.handle(rt, anomaly)
        elif not job.state.finished:
            rt.finished_at = None

    async def remember_allocation(
        self, rt: runtime.WorkloadRuntime, job: workloads.JobSnapshot, previous: workloads.JobSnapshot, *,
        first: bool,
    ) -> None:
        """Record where the scheduler placed this attempt, durably: after a restart that record,
        not log text, decides which nodes a recovery may name, exclude, drain or remember."""
        if job.nodes and (first or job.nodes != previous.nodes or job.attempt != previous.attempt):
            await self.store.record_attempt(workload=rt.workload, attempt=job.attempt, at=self.clock.now(),
                                            nodes=job.nodes)

    async def forget_settled(self) -> None:
        """Stop tracking the workloads finished longer than ``finished_grace_s`` ago, recovery done."""
        now = self.clock.now()
        for name, rt in list(self.runtimes.items()):
            if (rt.finished_at is not None and not self.runner.busy(rt)
                    and now - rt.finished_at >= self.settings.finished_grace_s):
                self.runtimes.pop(name, None)
                await self.close(rt, f"finished ({rt.job.state.value})")

    async def drop_incarnation(self, rt: runtime.WorkloadRuntime) -> None:
        """Stop following a workload's object that was deleted and created again under the same id
        before we saw it go: its recovery in flight (if any) is cancelled, as it would act on the new
        object, and the newcomer is tracked afresh (``track`` retires the old history)."""
        if rt.task is not None and self.runner.busy(rt):
            rt.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await rt.task
        self.runtimes.pop(rt.workload, None)
        await self.close(rt, f"object {rt.job.incarnation} replaced by a new object under its id", forget=False)

    async def close(self, rt: runtime.WorkloadRuntime, why: str, *, forget: bool = True) -> None:
        """Stop following ``rt``; ``forget=False`` keeps discovery's record of the job id (the id is
        followed on at once, for another object)."""
        rt.closed = True
        rt.book.close()
        self.journal.forget(rt.workload)
        self.tailing.unreadable.pop(rt.workload, None)
        if forget:
            self.discovery.forget(rt.job.job_id)
        logger.info("no longer tracking %s: %s", rt.workload, why)
