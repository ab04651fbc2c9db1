"""The engine: one loop that wires signals -> detect -> attribute -> policy -> store -> act.

Place: below the shells (``cli.run`` for the standalone runner, the kopf operator next) and
above every stage. It owns no scheduler- or Kubernetes-specific logic: the scheduler is a
``schedulers.base.Scheduler``, the store an ``store.audit.AuditStore``.

Per opted-in job (a *workload*; identity of one run = (workload, attempt) where attempt is the
scheduler's restart count) it keeps a ``WorkloadRuntime``: the effective policy (the selected
RecoveryPolicy plus the job comment's overrides), one ``detect.stream.WorkloadDetector`` for
the current attempt, tailers of the job's output files, and the policy ledger.

Three timers drive it: discovery (list opted-in jobs), tailing (read new lines, feed and tick
the detectors), and the watchdog sweep. Every anomaly goes through attribution and the policy
to an Advice, which is recorded *before* the executor touches the scheduler. Recovery of one
workload runs as its own named task so a slow scheduler call never stalls detection elsewhere.
With ``--prometheus-url``, a fourth timer reads the GPU metrics of running jobs (a hardware fault
there is an anomaly), and every verdict weighs GPU metrics and the scheduler's node state
(``attribute.evidence``); a crash the log cannot attribute waits for the metrics in its task.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import functools
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from trainguard import health as health_mod
from trainguard import settings as settings_mod
from trainguard import shards as shards_mod
from trainguard.act import executor as executor_mod
from trainguard.act import ports as act_ports
from trainguard.act import switch as switch_mod
from trainguard.act import undrain, whose
from trainguard.attribute import allocation as alloc
from trainguard.attribute import evidence as node_evidence
from trainguard.attribute import external, lemon, rules
from trainguard.detect import catalog as catalog_mod
from trainguard.detect import hosts, own_actions, sanitize, stream
from trainguard.detect import matcher as matcher_mod
from trainguard.journal import recorder as journal_mod
from trainguard.model import (
    actions,
    advice,
    anomalies,
    clock,
    limits,
    routing,
    signals,
    user_regex,
    verdicts,
    vocab,
    workloads,
)
from trainguard.model import evidence as evidence_model
from trainguard.observe import metrics as metrics_mod
from trainguard.observe import scorecard_watch
from trainguard.policy import blast_radius, decide, ledger, loader, overrides
from trainguard.policy import model as policy_model
from trainguard.schedulers import base
from trainguard.signals import discovery, fileio, gpu_metrics, resume, sources, tailbook, tailer
from trainguard.store import audit
from trainguard.store import journal as journal_store
from trainguard.store import ledger as limits_ledger

logger = logging.getLogger(__name__)

Listener = Callable[[str, str, dict[str, object]], Awaitable[None]]
"""Called as ``listener(kind, workload, payload)`` after each audit record the engine writes:
the seam for Kubernetes status/Events, the console and metrics."""

TRACK_BATCH = 512
"""New jobs tracked concurrently in one discovery round (``Engine._track_all``)."""

_FAILED_STATES = frozenset(
    {
        workloads.JobState.FAILED,
        workloads.JobState.NODE_FAIL,
        workloads.JobState.OUT_OF_MEMORY,
        workloads.JobState.TIMEOUT,
        workloads.JobState.BOOT_FAIL,
    }
)


@dataclass
class WorkloadRuntime:
    """What the engine keeps for one tracked workload."""

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
    advised: dict[int, str] = field(default_factory=dict)
    """Attempt -> the first-cause category already advised on (one advice per attempt unless
    stronger evidence changes the first cause)."""
    task: asyncio.Task[None] | None = None
    ready: bool = False
    """Tracking has started (its files are placed): the tailing round may read them."""
    finished_at: float | None = None
    opt_in_errors: list[str] = field(default_factory=list)
    last_anomaly: anomalies.Anomaly | None = None
    last_verdict: verdicts.Verdict | None = None
    last_advice: advice.Advice | None = None
    disposition: vocab.Disposition | None = None
    deferred: collections.deque[tuple[anomalies.Anomaly, verdicts.Verdict, int]] = field(
        default_factory=collections.deque
    )
    """Decisions waiting for the recovery in flight (``task``) to finish."""
    route: routing.Route | None = None
    """How the workload was routed to ``policy_name`` (recorded with every advice)."""
    recent: collections.deque[dict[str, object]] = field(default_factory=lambda: collections.deque(maxlen=20))
    """The latest audit records of this workload (kind, time, summary), newest last: the view
    that Kubernetes status and the console show; the audit store stays the durable log."""
    metric_faults: dict[int, set[tuple[str, str, int | None, float]]] = field(default_factory=dict)
    """Attempt -> GPU-metric faults already raised as anomalies (each one once)."""
    unwatched: int | None = None
    """The attempt first seen already ended with no history of ours (it ended before we watched):
    recorded as such and never judged or acted on (``Engine._unwatched``). A later attempt is watched."""
    not_ours: set[int] = field(default_factory=set)
    """Attempts somebody else's decision ended (``act.whose``), recorded once each, never acted on."""
    awaiting_metrics: bool = False
    """A crash's decision waits for the GPU metrics (``Engine._after_metrics``): like a deferred
    decision, its lines must be read again after a restart, so read positions are not saved."""

    @property
    def tailers(self) -> list[tailer.LogTailer]:
        return [f.tailer for f in self.book.files if isinstance(f, tailbook.Followed)]


class Engine:
    """The recovery loop over one scheduler."""

    def __init__(
        self,
        scheduler: base.Scheduler,
        store: audit.AuditStore,
        policies: loader.PolicySet,
        catalog: catalog_mod.Catalog,
        *,
        clock_: clock.Clock,
        settings: settings_mod.EngineSettings,
        listeners: Sequence[Listener] = (),
        health: health_mod.Health | None = None,
        fence: act_ports.Fence = act_ports.ALWAYS_LEADER,
        log_books: sources.BookFactory = sources.file_books,
        gpu_metrics_: gpu_metrics.GpuMetrics | None = None,
        journal: journal_mod.Recorder | None = None,
        node_sources: Sequence[sources.NodeSource] = (),
        shards: shards_mod.Ownership | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.node_actions = sorted(base.node_actions(scheduler))
        """The policy actions that let the scheduler take a node out of service (``base.node_actions``)."""
        self.shards = shards
        """With ``--shards N``: the shards this replica holds; it tracks and acts on their workloads only,
        and is the executor's fence (each mutation fenced on its workload's shard; ``shards.py``)."""
        if shards is not None:
            fence = shards
        self.journal = journal if journal is not None else journal_mod.Recorder(
            journal_store.JournalStore(store.sql_engine, retention_s=settings.journal_retention_s,
                                       max_bytes=settings.journal_max_bytes), clock_)
        """The signal journal: each decision's inputs, for replay and backtest (``journal/``)."""
        self.node_sources = list(node_sources)
        """Further node evidence (e.g. Kubernetes Node conditions), asked beside the GPU metrics for every verdict."""
        self.gpu_metrics = gpu_metrics_
        """DCGM evidence from Prometheus/VictoriaMetrics (``--prometheus-url``); None: not configured."""
        self.health = health if health is not None else health_mod.Health()
        """Reachability of the scheduler and the store, learned from the timer loops' rounds."""
        self.store = store
        self.policies = policies
        self.catalog = catalog
        self.clock = clock_
        self.settings = settings
        self.listeners = list(listeners)
        self.switch = switch_mod.ActionSwitch(settings.allow_action, store)
        """Both run-time keys (the cluster switch, the runtime pause), read before every Action step."""
        self.executor = executor_mod.Executor(
            scheduler, store, clock_, blast_limit=self._blast_limit, fence=fence, switch=self.switch,
            store_outage=lambda exc: health_mod.classify(exc) == health_mod.STORE,
            scheduler_outage=lambda exc: (health_mod.classify(exc) == health_mod.SCHEDULER
                                          and not isinstance(exc, base.JobGone | base.Unsupported)))
        self._paused: str | None = None
        """Why actions are off now, as the last sweep read it (node housekeeping, the gauge)."""
        self._discovered = False
        """Whether a discovery round has completed: a job first seen ended in the first round had
        ended before this engine could watch it (``_unwatched``)."""
        self.discovery = discovery.JobDiscovery(
            scheduler if shards is None else shards_mod.OwnedLister(scheduler, shards), clock_)
        self.undrainer = undrain.Undrainer(scheduler, store, clock_, self._undrain_rule)
        self.runtimes: dict[str, WorkloadRuntime] = {}
        self.mode_overrides: dict[str, vocab.Mode] = {}
        self.workload_overrides: dict[str, dict[str, object]] = {}
        """Workload -> policy overrides set by the shell (WorkloadRecovery ``spec.overrides``)."""
        self._matchers: dict[str, matcher_mod.Matcher] = {}
        """Compiled matchers by the policy's extra patterns (most policies share ``_base_matcher``)."""
        self._base_matcher = matcher_mod.build_matcher(catalog)
        self._tasks: set[asyncio.Task[None]] = set()
        self.log_books = log_books
        """Makes each workload's book: the log source of this installation (``signals.sources``)."""
        self.file_pool = fileio.FilePool()
        """Threads for output-file I/O: a hung NFS/Lustre read never blocks the event loop."""
        self.started_at = clock_.now()
        """When this engine started: an attempt that started later was watched from its start."""
        self.started_second = math.floor(self.started_at)
        """``started_at`` to the whole second, as schedulers give start and end times (Slurm truncates
        them): a job that ended or started in the second we started is compared with this, or one
        submitted a moment after we started would read as ended before we watched it."""
        self.metrics = metrics_mod.EngineMetrics.shared(self.health.metrics.registry)
        """Prometheus metrics, on the health model's registry (served at /metrics by the shells)."""
        if self.metrics not in store.observers:
            store.observers.append(self.metrics)
        self.scorecard_watch = scorecard_watch.ScorecardWatch(scheduler, store, clock_, metrics=self.metrics)
        """Snapshots of the scheduler after each Monitor-mode advice, for ``trainguard scorecard``; one per store
        (a new engine, e.g. per leadership term, replaces the previous one's)."""
        store.observers[:] = [o for o in store.observers if not isinstance(o, scorecard_watch.ScorecardWatch)]
        store.observers.append(self.scorecard_watch)
        self.metrics.count_workloads(self.workload_states)
        self._positions_saved_at: float | None = None
        """When the tailing round last saved the moved read positions (``position_save_interval_s``)."""
        self.unreadable: dict[str, str] = {}
        """Workload -> why its output cannot be read now (``_note_unreadable``): such a workload is
        reported (log, ``trainguard_unreadable_workloads``, status), never silently unmonitored."""

    def workload_states(self) -> list[str]:
        """The scheduler's state of every tracked workload (``trainguard_workloads``)."""
        return [rt.job.state.value for rt in self.runtimes.values()]

    # ------------------------------------------------------------------ lifecycle

    async def run(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set; then wait for in-flight recoveries to finish. Start-up recovery
        is retried (with backoff) until the scheduler and the store answer: nothing is decided before
        our own leftovers of a previous run are settled."""
        if self.shards is not None and not await self._until_done(self.shards.leases.step, stop, health_mod.STORE):
            self.metrics.stop_counting(self.workload_states)
            return
        if not await self._until_done(self.recover, stop, health_mod.STORE):
            self.metrics.stop_counting(self.workload_states)
            return
        loops = [
            self._spawn(self._every(self.settings.discovery_interval_s, self.discover, stop, health_mod.SCHEDULER),
                        "discovery"),
            self._spawn(self._every(self.settings.tail_interval_s, self.tail, stop), "tailing"),
            self._spawn(self._every(self.settings.sweep_interval_s, self.sweep, stop, health_mod.STORE),
                        "watchdog-sweep"),
            self._spawn(self._every(self.settings.sweep_interval_s, self.scorecard_watch.sweep, stop),
                        "scorecard-watch"),
        ]
        if self.shards is not None:
            loops.append(self._spawn(self._every(self.shards.leases.timing.renew_interval_s, self.shards.leases.step,
                                                 stop, health_mod.STORE), "shard-leases"))
        if self.gpu_metrics is not None:
            loops.append(self._spawn(self._every(self.settings.metrics_interval_s, self.watch_metrics, stop),
                                     "gpu-metrics"))
        await stop.wait()
        for task in loops:
            task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        pending = [rt.task for rt in self.runtimes.values() if rt.task is not None and not rt.task.done()]
        if pending:
            await asyncio.wait(pending, timeout=30)
        try:  # the positions the last rounds moved: a restart resumes exactly here
            await self._save_positions(list(self.runtimes.values()))
        except Exception as exc:
            logger.warning("could not save the read positions on stopping (a restart re-reads the last "
                           "seconds of output): %s", exc)
        for rt in self.runtimes.values():
            rt.book.close()
        self.file_pool.close()
        if self.shards is not None:
            await self.shards.leases.release()
        self.metrics.stop_counting(self.workload_states)  # a standby replica tracks nothing

    def abort(self) -> None:
        """Stop every in-flight recovery now (leadership lost): cancel their tasks.

        Like a crash of this process: a step whose intent is committed but whose result is not is
        resumed by whoever acts next (the new leader), which re-reads the scheduler first; the
        watchdog there releases any hold of ours. Call it before setting ``run``'s stop event, so
        that ``run`` does not wait for them.
        """
        for rt in self.runtimes.values():
            if rt.task is not None and not rt.task.done():
                logger.warning("%s: recovery %s stopped (not the leader any more)", rt.workload, rt.task.get_name())
                rt.task.cancel()

    async def recover(self) -> None:
        """On start: the watchdog releases leftover holds of ours; pending advice is resumed. Sharded:
        only in the shards held (the watchdog asks the fence), the others' holders do theirs."""
        if self.shards is not None:
            self.shards.note(await self.scheduler.list_jobs())
            self.shards.gained()  # what is held now is recovered here, not again by discover()
        released = await self.executor.watchdog.recover()
        for item in released:
            logger.warning("released a hold left by a previous run on %s (generation %d)", item.workload,
                           item.generation)
        for item in await self.store.pending_advice():
            if not self._mine(item.workload):
                continue
            logger.info("resuming advice %s attempt %d generation %d", item.workload, item.attempt, item.generation)
            await self.executor.reconcile(item)

    def _mine(self, workload: str) -> bool:
        """Whether this engine acts on ``workload``: always, unless sharded and its shard is another's."""
        return self.shards is None or self.shards.owns(workload)

    async def _take_over(self) -> None:
        """Shards gained since the last round (another replica died or released them): resume their
        pending generations and release holds of ours left in them, as ``recover`` does at start."""
        if self.shards is None or not (gained := self.shards.gained()):
            return
        logger.info("shards %s now held: resuming their pending recoveries", sorted(gained))
        await self.executor.watchdog.recover()
        for item in await self.store.pending_advice():
            if self.shards.index_of(item.workload) not in gained:
                continue
            rt = self.runtimes.get(item.workload)
            if rt is None:
                await self.executor.reconcile(item)
            elif rt.task is None or rt.task.done():
                rt.task = self._spawn(self._carry_out(rt, item), f"takeover:{item.workload}:{item.generation}")

    async def _every(self, interval: float, work: Callable[[], Awaitable[None]], stop: asyncio.Event,
                     *reaches: str) -> None:
        """Run ``work`` every ``interval`` s until ``stop``. A failed round must not end the loop: the
        next one retries, after a backoff with jitter while it keeps failing; the outage is reported
        to the health model (one log line per change of state). ``reaches``: the dependencies a
        successful round has certainly called (so it proves them reachable)."""
        backoff = health_mod.Backoff(interval, ceiling=max(self.settings.max_backoff_s, interval))
        while not stop.is_set():
            delay = backoff.succeeded() if await self._round(work, reaches) else backoff.failed()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=delay)

    async def _until_done(self, work: Callable[[], Awaitable[None]], stop: asyncio.Event, *reaches: str) -> bool:
        """Run ``work`` until one round succeeds (True) or ``stop`` is set (False), backing off."""
        backoff = health_mod.Backoff(self.settings.discovery_interval_s,
                                     ceiling=max(self.settings.max_backoff_s, self.settings.discovery_interval_s))
        while not stop.is_set():
            if await self._round(work, reaches):
                return True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=backoff.failed())
        return False

    async def _round(self, work: Callable[[], Awaitable[None]], reaches: tuple[str, ...]) -> bool:
        """One round of ``work``, its result reported to the health model; True when it succeeded."""
        try:
            await work()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.health.round_failed(getattr(work, "__name__", "work"), exc)
            return False
        self.health.round_succeeded(getattr(work, "__name__", "work"), *reaches)
        return True

    def _spawn(self, coro: Awaitable[None], name: str) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(_log_failure)
        return task

    # ------------------------------------------------------------------ discovery

    async def discover(self) -> None:
        """One discovery round: start tracking new jobs, follow requeues, settle finished jobs."""
        delta = await self.discovery.poll()
        await self._track_all(delta.new)
        for job in (*delta.changed, *delta.finished):
            rt = self.runtimes.get(job.workload)
            if rt is not None and job.incarnation and rt.job.incarnation and job.incarnation != rt.job.incarnation:
                await self._drop_incarnation(rt)
                rt = None
            if rt is None:
                await self._track_all([job])
                continue
            await self._update(rt, job)
        for job in delta.gone:
            rt = self.runtimes.pop(job.workload, None)
            if rt is not None and self.shards is not None and not self.shards.owns(job.workload):
                if rt.task is not None and not rt.task.done():
                    rt.task.cancel()  # fenced anyway; the shard's new holder resumes it
                await self._close(rt, "its shard is no longer held by this replica")
            elif rt is not None:
                if rt.job.incarnation and not rt.job.state.finished and rt.spec is not None:
                    # A Kubernetes object gone before it finished: someone deleted it. Theirs; recorded.
                    await self._record_not_ours(rt, rt.job, rt.job.attempt, whose.Change(
                        whose.PERSON, "deleted", f"the {rt.job.name or 'workload'} object was deleted"))
                await self._close(rt, "the scheduler no longer knows the job")
        await self._take_over()
        await self._forget_settled()
        await self.journal.flush()
        self._discovered = True

    def _effective_spec(
        self, job: workloads.JobSnapshot, opt_in: overrides.OptIn
    ) -> tuple[policy_model.RecoveryPolicySpec | None, list[str], routing.Route]:
        """The policy covering ``job`` (``loader.PolicySet.route``) with its comment's overrides, the
        workload's mode override and the cluster-wide Action switch applied; None (and why) when no
        policy covers it; and the routing decision."""
        policy, route = self.policies.route(opt_in.policy_name, job)
        if policy is None:
            return None, [route.reason], route
        spec, errors = overrides.resolve(policy.spec, opt_in)
        extra = self.workload_overrides.get(job.workload)
        if extra:  # after the comment's, by the same rules (budgets can only be lowered)
            spec, more = overrides.resolve(spec, overrides.OptIn(overrides=dict(extra)))
            errors = [*errors, *more]
        forced = self.mode_overrides.get(job.workload)
        if forced is not None:
            spec = spec.model_copy(update={"mode": forced})
        if not self.settings.allow_action and spec.mode != vocab.Mode.MONITOR:
            spec = spec.model_copy(update={"mode": vocab.Mode.MONITOR})
        return spec, errors, route

    def update_policies(self, policies: loader.PolicySet) -> None:
        """Swap the policy set (e.g. a RecoveryPolicy changed in Kubernetes); tracked workloads
        take the new effective policy at once, no restart needed. Their detectors keep running;
        detection settings apply from the next attempt."""
        self.policies = policies
        self._refresh_specs()

    def set_mode_override(self, workload: str, mode: vocab.Mode | None) -> None:
        """A per-workload mode override (WorkloadRecovery spec); None removes it."""
        if mode is None:
            self.mode_overrides.pop(workload, None)
        else:
            self.mode_overrides[workload] = mode
        self._refresh_specs()

    def set_workload_overrides(self, workload: str, values: dict[str, object]) -> None:
        """Per-workload policy overrides from the shell, keyed like the opt-in comment's
        (``max-retries``, ``hang-timeout`` in seconds, ...); empty removes them. They apply on top of
        the comment's, by the same rules; detection settings apply from the next attempt."""
        if values:
            self.workload_overrides[workload] = dict(values)
        else:
            self.workload_overrides.pop(workload, None)
        self._refresh_specs()

    def _refresh_specs(self) -> None:
        for rt in self.runtimes.values():
            opt_in = overrides.parse_opt_in(rt.job.comment)
            if opt_in is None:
                continue
            spec, errors, route = self._effective_spec(rt.job, opt_in)
            rt.route, rt.policy_name = route, route.policy or opt_in.policy_name or ""
            if spec is not None:
                rt.matcher = self._matcher_for(spec)
            rt.checkpoint_re = user_regex.compile(spec.detection.checkpoint_regex) if spec is not None else None
            rt.spec = spec
            rt.opt_in_errors = errors

    async def _track_all(self, jobs: Sequence[workloads.JobSnapshot]) -> None:
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
            results = await asyncio.gather(*(self._track(j, known=j.workload in known) for j in chunk),
                                           return_exceptions=True)
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

    async def _track(self, job: workloads.JobSnapshot, *, known: bool = True) -> None:
        """Start tracking ``job``. ``known=False``: the store had no row for it (``_track_all``), so
        there is no history or read position to read back."""
        now = self.clock.now()
        opt_in = overrides.parse_opt_in(job.comment)
        if opt_in is None:  # discovery lists only opted-in jobs; never touch anything else
            return
        spec, errors, route = self._effective_spec(job, opt_in)
        name = route.policy or opt_in.policy_name or ""
        if known and job.incarnation:
            retired = await self.store.retire_incarnation(job.workload, incarnation=job.incarnation, at=now)
            if retired is not None:
                # Deleted and created again under the same name: a new job, whose history is not the
                # old one's (that continues under the retired id).
                logger.warning("%s is a new object (uid %s): the previous one's history is kept as %s",
                               job.workload, job.incarnation, retired)
                known = False
        with self.store.grouped():  # shares a commit with the other new jobs of this round
            await self.store.upsert_workload(
                workload=job.workload, scheduler=self.scheduler.name, job_id=job.job_id, at=now, policy=name,
                comment=job.comment[:1024], opt_in_errors=errors, state=job.state.value, incarnation=job.incarnation,
            )
        if errors:
            logger.warning("workload %s: %s", job.workload, "; ".join(errors))
        matcher = self._matcher_for(spec) if spec is not None else None
        checkpoint = user_regex.compile(spec.detection.checkpoint_regex) if spec is not None else None
        rt = WorkloadRuntime(
            workload=job.workload, job=job, policy_name=name, spec=spec, detector=None,
            book=self.log_books(job.workload, job.job_id, self.clock, self.file_pool),
            history=ledger.WorkloadHistory(workload=job.workload), checkpoint_re=checkpoint, matcher=matcher,
            opt_in_errors=errors, route=route,
        )
        if known:
            await self._restore_history(rt)
            rt.job = job = await self._floor_attempt(job, rt.history)
        elif spec is not None and self._unwatched(job):
            rt.unwatched = job.attempt
            await self._record_unwatched(rt, job)
        self.runtimes[job.workload] = rt
        logger.info("tracking %s (job %s, attempt %d, %s, policy %s%s: %s)", job.workload, job.job_id, job.attempt,
                    job.state.value, name or "-", f", mode {spec.mode.value}" if spec else ", NOT COVERED",
                    route.reason)
        resume_from = await self.store.tail_positions(job.workload) if known else []
        with self.store.grouped():
            await self._open_tailers(rt, resume_from=resume_from)
        await self._update(rt, job, first=True)
        rt.ready = True

    def _unwatched(self, job: workloads.JobSnapshot) -> bool:
        """Whether ``job``, first seen with no history in the store, had already ended before this engine
        could watch it: it ended before we started, or it is listed ended in our first discovery round
        without an end time. Nobody watched that failure; a person may have resubmitted the job since,
        or decided not to. It is recorded and never acted on (in both modes). A job that ended after
        we started (between two listings) was watched and is judged as usual."""
        if not job.state.finished:
            return False
        if job.ended_at is not None:
            return job.ended_at < self.started_second
        return not self._discovered

    async def _record_unwatched(self, rt: WorkloadRuntime, job: workloads.JobSnapshot) -> None:
        change = whose.Change(whose.SCHEDULER, "ended-unwatched",
                              f"attempt {job.attempt} had already ended ({job.state.value}) before Trainguard "
                              "watched it: recorded, not judged or acted on")
        await self._record_not_ours(rt, job, job.attempt, change)

    async def _record_not_ours(self, rt: WorkloadRuntime, job: workloads.JobSnapshot, attempt: int,
                               change: whose.Change) -> None:
        """Record somebody else's decision about ``attempt`` once (``act.whose``); never acted on."""
        if attempt in rt.not_ours:
            return
        rt.not_ours.add(attempt)
        payload = change.payload(job)
        await self.store.record_not_ours(workload=rt.workload, attempt=attempt, payload=payload, at=self.clock.now())
        await self._notify(rt, vocab.AuditKind.ACTION, payload)
        logger.info("%s attempt %d: %s; recorded, not acted on", rt.workload, attempt, change)

    async def _note_ending(self, rt: WorkloadRuntime, job: workloads.JobSnapshot,
                           attempt: int) -> whose.Change | None:
        """Record, once, when ``attempt`` was ended or replaced by somebody else's decision (``act.whose``),
        judged from ``job`` and our own action rows; returns that decision (None: the workload's failure
        stands). Discovery calls it on every ending, whether or not the output shows anything, so the
        console and the Events say who ended it; the decision gate (``_not_ours``) calls it too."""
        if attempt in rt.not_ours:
            return _ALREADY_RECORDED
        change = whose.ending(job, attempt, await self.store.actions_of(rt.workload))
        if change is not None:
            await self._record_not_ours(rt, job, attempt, change)
        return change

    async def _not_ours(
        self, rt: WorkloadRuntime, attempt: int
    ) -> tuple[whose.Change | None, workloads.JobSnapshot]:
        """``_note_ending`` on a fresh read of the job, and that read (no read once recorded)."""
        if attempt in rt.not_ours:
            return _ALREADY_RECORDED, rt.job
        job = await self._fresh_job(rt)
        return await self._note_ending(rt, job, attempt), job

    async def _floor_attempt(
        self, job: workloads.JobSnapshot, history: ledger.WorkloadHistory
    ) -> workloads.JobSnapshot:
        """The job as its adapter sees it once told the highest attempt we recorded, for an adapter
        that counts some restarts in memory only (``schedulers.base.AttemptFloor``); otherwise ``job``.
        A scheduler error leaves ``job`` as it was (tracked all the same, and logged)."""
        recorded = max((record.attempt for record in history.attempts), default=0)
        if job.attempt >= recorded or not isinstance(self.scheduler, base.AttemptFloor):
            return job
        try:
            await self.scheduler.floor_attempt(job.job_id, recorded)
            return await self.scheduler.get_job(job.job_id)
        except base.SchedulerError as exc:
            logger.warning("%s: attempt %d recorded, the scheduler reports %d and could not be told: %s",
                           job.workload, recorded, job.attempt, exc)
            return job

    async def _restore_history(self, rt: WorkloadRuntime) -> None:
        """A workload an earlier run of ours tracked: its policy history and which of its attempts
        were already advised on, from the store, so that a restart resumes where it stopped
        instead of granting fresh retry budgets or advising an attempt a second time."""
        facts = await self.store.attempt_facts(rt.workload)
        if not facts:
            return
        records: list[ledger.AttemptRecord] = []
        given: list[tuple[int, int, vocab.AdviceAction, list[str]]] = []
        for fact in facts:
            records.append(ledger.AttemptRecord(
                attempt=fact.attempt, started_at=fact.started_at, ended_at=fact.ended_at,
                checkpoint_saved=fact.checkpoint_saved,
                anomaly_category=_enum(vocab.Category, fact.category),
                attribution=_enum(vocab.Attribution, fact.attribution),
            ))
            for generation, action, exclusions in fact.advice:
                known = _enum(vocab.AdviceAction, action)
                if known is not None:
                    given.append((fact.attempt, generation, known, exclusions))
        rt.history = ledger.restored(rt.workload, records, given)
        for record in rt.history.attempts:
            if record.action is not None:
                acted = record.action != vocab.AdviceAction.NONE and record.attribution is not None
                rt.advised[record.attempt] = (record.attribution.value if acted and record.attribution
                                              else vocab.Attribution.NONE.value)
        logger.info("%s: resumed its history: %d attempt(s), %d advice, excluded %s", rt.workload,
                    len(records), len(given), ", ".join(rt.history.excluded_nodes) or "none")

    def _matcher_for(self, spec: policy_model.RecoveryPolicySpec) -> matcher_mod.Matcher:
        """One compiled matcher per policy (its extra patterns extend the catalog)."""
        if not spec.detection.extra_patterns:
            return self._base_matcher
        # Keyed by the patterns themselves, not their ids: a policy that changes a pattern's regex
        # under the same id must get a new matcher.
        key = "\n".join(p.model_dump_json() for p in spec.detection.extra_patterns)
        if key not in self._matchers:
            self._matchers[key] = matcher_mod.build_matcher(self.catalog.extended(spec.detection.extra_patterns))
        return self._matchers[key]

    async def _open_tailers(self, rt: WorkloadRuntime, resume_from: Sequence[audit.TailRecord] | None = None) -> None:
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
                    start = await self._attempt_start(rt, path, [r for r in resume_from if r.path == path])
                rt.book.add(path, source, start)
        if resume_from is not None:
            await self._save_positions([rt], force=True)

    async def _attempt_start(
        self, rt: WorkloadRuntime, path: str, stored: Sequence[audit.TailRecord]
    ) -> resume.Start | None:
        """Where the current attempt's lines start in ``path`` (first sight of the job); None = from 0."""
        job = rt.job
        mine = [r for r in stored if r.attempt == job.attempt]
        earlier = [r for r in stored if r.attempt < job.attempt]
        if rt.book.kind != sources.FILES:  # a log store: the source knows its own attempt boundaries
            return rt.book.attempt_start(path, attempt=job.attempt, running=_has_run(job) and rt.spec is not None,
                                         started_at=job.started_at, mine=[_position(r) for r in mine],
                                         earlier=[_position(r) for r in earlier])
        if rt.spec is None:  # never judged while no policy covers it: just note where the file ends
            return await rt.book.run(lambda: resume.pending_start(path))
        if not _has_run(job):
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
            return resume.Start(_position(row), row.basis or "stored")  # keep how its start was found
        if job.attempt == 0 and job.started_at is None and not earlier:
            return resume.Start(tailer.TailPosition(path, None, 0, 0), "first_attempt")
        previous = _position(earlier[-1]) if earlier else None
        previous_is_last = bool(earlier) and earlier[-1].attempt == job.attempt - 1
        now = self.clock.now()
        found = await rt.book.run(lambda: resume.running_start(
            path, started_at=job.started_at, previous=previous, previous_is_last=previous_is_last, now=now))
        if found is None:
            return None
        if found.basis == "unknown" and not earlier and self._first_run_watched(job):
            # The job's first run started while we were watching and was listed a moment later:
            # the file has no earlier attempt of this job, and it was not written before the start
            # by this job. (A file shared with an older job is told apart by mtime or timestamps.)
            found = resume.Start(tailer.TailPosition(path, None, 0, 0), "first_attempt")
        level = logging.WARNING if found.basis == "unknown" and found.skipped else logging.INFO
        logger.log(level, "%s attempt %d: reading %s %s", rt.workload, job.attempt, path, found.describe())
        return found

    async def _save_positions(self, runtimes: Sequence[WorkloadRuntime], *, force: bool = False) -> None:
        """Store the read positions that moved (one transaction for all), as a restart needs them.

        A workload is skipped while a crash window is open or a decision waits (``force``
        aside): its lines are in the detector's memory only, and a restart must read them again.
        """
        records: list[audit.TailRecord] = []
        changed: list[tuple[WorkloadRuntime, list[sources.Followed]]] = []
        for rt in runtimes:
            if rt.spec is None:
                continue  # never judged: nothing to resume
            if not force and (rt.deferred or rt.awaiting_metrics
                              or (rt.detector is not None and rt.detector.settling)):
                continue
            files = rt.book.unsaved() if not force else [f for f in rt.book.files if f.consumed is not None]
            if files:
                records += self._tail_records(rt, files)
                changed.append((rt, files))
        if not records:
            return
        await self.store.save_tail_positions(records, at=self.clock.now())
        for rt, files in changed:
            rt.book.mark_saved(files)

    def _tail_records(self, rt: WorkloadRuntime, files: Sequence[sources.Followed]) -> list[audit.TailRecord]:
        """The consumed positions of ``files``, as rows of the attempt their lines belong to."""
        attempt = rt.detector_attempt if rt.detector is not None else rt.job.attempt
        return [
            audit.TailRecord(workload=rt.workload, attempt=attempt, path=f.path, source=f.source,
                             inode=f.consumed.inode, offset=f.consumed.offset, lineno=f.consumed.lineno,
                             fingerprint=f.consumed.fingerprint, basis=f.basis)
            for f in files if f.consumed is not None
        ]

    def _new_detector(self, rt: WorkloadRuntime, job: workloads.JobSnapshot) -> None:
        if rt.spec is None or rt.matcher is None:
            return
        d = rt.spec.detection
        settings = stream.DetectionSettings(
            hang_timeout_s=d.hang_timeout,
            progress_regex=d.progress_regex,
            throughput_drop_fraction=d.throughput_drop_threshold,
            throughput_window_s=d.throughput_window,
            settle_s=d.settle,
        )
        rank_map = hosts.RankMap(job.nodes, _tasks_per_node(job))
        rt.detector = stream.WorkloadDetector(
            rt.matcher, settings, self.clock, workload=rt.workload, attempt=job.attempt, rank_map=rank_map
        )
        rt.detector_attempt = job.attempt
        rt.history = ledger.record_attempt_start(rt.history, job.attempt, self.clock.now())

    async def _update(self, rt: WorkloadRuntime, job: workloads.JobSnapshot, *, first: bool = False) -> None:
        """A fresh snapshot of a tracked job."""
        now = self.clock.now()
        previous = rt.job
        rt.job = job
        await self.journal.snapshot(job)
        if job.stdout_path != previous.stdout_path or job.stderr_path != previous.stderr_path:
            rt.book.close()
            rt.book = self.log_books(rt.workload, job.job_id, self.clock, self.file_pool)
            await self._open_tailers(rt)
        # A new attempt gets a new detector once it runs: until then, lines still arriving from the
        # old attempt's teardown (slurmstepd "CANCELLED ... DUE TO JOB REQUEUE") go to the old one.
        # An attempt first seen already failed (it started and died between two listings) gets its
        # own detector too, so its exit state is judged.
        if rt.unwatched is not None and job.attempt > rt.unwatched:
            rt.unwatched = None  # requeued since (by a person): this attempt is watched from its start
        ran = job.state == workloads.JobState.RUNNING or job.state in _FAILED_STATES
        if rt.unwatched is not None:
            pass  # ended before we watched: its output is not judged
        elif (rt.detector is None and _has_run(job)) or (
            rt.detector is not None and job.attempt > rt.detector_attempt and ran
        ):
            if rt.detector is not None:
                await self._drain(rt)
                rt.book.set_basis("observed")  # we read up to the attempt's start ourselves
                await self._conclude_replaced(rt, job)
            elif rt.spec is not None:
                await self._place_at_attempt_start(rt, job)
            self._new_detector(rt, job)
            with self.store.grouped() if first else contextlib.nullcontext():  # see _track_all
                if rt.detector is not None:
                    await self._save_positions([rt], force=True)  # where this attempt's lines start
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
            await self._note_ending(rt, job, previous.attempt)  # a person's requeue is theirs
        if not first and job.held and not previous.held and not job.state.finished and rt.spec is not None:
            await self._note_ending(rt, job, job.attempt)  # a person's hold or suspend is theirs
        if not first and (job.state != previous.state or job.attempt != previous.attempt):
            await self.store.set_workload_state(rt.workload, job.state.value, at=now)
        if rt.detector is not None and rt.detector.attempt == job.attempt and job.nodes and job.nodes != previous.nodes:
            # First seen pending: the rank -> node layout exists only once the job runs.
            rt.detector.rank_map = hosts.RankMap(job.nodes, _tasks_per_node(job))
        with self.store.grouped() if first else contextlib.nullcontext():  # see _track_all
            await self._remember_allocation(rt, job, previous, first=first)
        if job.state.finished and (first or not previous.state.finished):
            if rt.spec is not None and rt.unwatched is None:
                await self._note_ending(rt, job, job.attempt)  # a person's cancel, the time limit: theirs
            await self._drain(rt)
            rt.finished_at = now
            rt.history = ledger.record_attempt_end(rt.history, job.attempt, now)
            await self.store.record_attempt(workload=rt.workload, attempt=job.attempt, at=now, ended_at=now,
                                            state=job.state.value)
            if rt.detector is not None and rt.detector.attempt == job.attempt and job.state in _FAILED_STATES:
                for anomaly in rt.detector.on_exit(job):
                    await self._handle(rt, anomaly)
        elif not job.state.finished:
            rt.finished_at = None

    async def _remember_allocation(
        self, rt: WorkloadRuntime, job: workloads.JobSnapshot, previous: workloads.JobSnapshot, *, first: bool
    ) -> None:
        """Record where the scheduler placed this attempt, durably: after a restart that record,
        not log text, decides which nodes a recovery may name, exclude, drain or remember."""
        if job.nodes and (first or job.nodes != previous.nodes or job.attempt != previous.attempt):
            await self.store.record_attempt(workload=rt.workload, attempt=job.attempt, at=self.clock.now(),
                                            nodes=job.nodes)

    async def _allocation(self, rt: WorkloadRuntime) -> set[str]:
        """Every node an attempt of the workload was placed on (the store's record plus the current snapshot)."""
        return {*await self.store.allocation(rt.workload), *rt.job.nodes}

    async def _forget_settled(self) -> None:
        now = self.clock.now()
        for name, rt in list(self.runtimes.items()):
            busy = rt.task is not None and not rt.task.done()
            if rt.finished_at is not None and not busy and now - rt.finished_at >= self.settings.finished_grace_s:
                self.runtimes.pop(name, None)
                await self._close(rt, f"finished ({rt.job.state.value})")

    async def _drop_incarnation(self, rt: WorkloadRuntime) -> None:
        """Stop following a workload's object that was deleted and created again under the same id
        before we saw it go: its recovery in flight (if any) is cancelled, as it would act on the new
        object, and the newcomer is tracked afresh (``_track`` retires the old history)."""
        if rt.task is not None and not rt.task.done():
            rt.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await rt.task
        self.runtimes.pop(rt.workload, None)
        await self._close(rt, f"object {rt.job.incarnation} replaced by a new object under its id", forget=False)

    async def _close(self, rt: WorkloadRuntime, why: str, *, forget: bool = True) -> None:
        """Stop following ``rt``; ``forget=False`` keeps discovery's record of the job id (the id is
        followed on at once, for another object)."""
        rt.book.close()
        self.journal.forget(rt.workload)
        self.unreadable.pop(rt.workload, None)
        if forget:
            self.discovery.forget(rt.job.job_id)
        logger.info("no longer tracking %s: %s", rt.workload, why)

    # ------------------------------------------------------------------ signals

    async def tail(self) -> None:
        """One tailing round over every tracked workload, then a detector tick each; then the
        read positions that moved are stored in one write."""
        runtimes = [rt for rt in self.runtimes.values() if rt.ready]
        for rt in runtimes:
            if (rt.detector is None and rt.spec is not None and rt.job.state == workloads.JobState.RUNNING
                    and rt.unwatched is None):
                await self._place_at_attempt_start(rt, rt.job)
                self._new_detector(rt, rt.job)  # a policy now covers it (e.g. a RecoveryPolicy appeared)
        # Every file is read concurrently on the pool: a hung file holds up no other workload.
        batches = await self._read_round(runtimes)
        self._note_unreadable(runtimes)
        for rt, batch in zip(runtimes, batches, strict=True):
            await self._feed_batch(rt, batch, tick=False)
            if rt.detector is not None:
                running = rt.job.state == workloads.JobState.RUNNING and rt.detector.attempt == rt.job.attempt
                for anomaly in rt.detector.tick():
                    if not running and anomaly.symptom in (vocab.Symptom.HANG, vocab.Symptom.STRAGGLER):
                        continue  # the silence or slowness of a run that is not running is no hang
                    await self._handle(rt, anomaly)
        now = self.clock.now()
        if self._positions_saved_at is None or now - self._positions_saved_at >= self.settings.position_save_interval_s:
            self._positions_saved_at = now
            await self._save_positions(runtimes)
        await self.journal.flush()

    def _note_unreadable(self, runtimes: Sequence[WorkloadRuntime]) -> None:
        """Workloads whose output files cannot be opened (the descriptor limit, permissions): an
        error line when one starts or changes, a line when it reads again, and the gauge."""
        for rt in runtimes:
            why = "; ".join(t.unreadable for t in rt.tailers if t.unreadable)
            before = self.unreadable.get(rt.workload)
            if why and why != before:
                logger.error("%s: its output cannot be read, so it is NOT monitored: %s", rt.workload, why)
                self.unreadable[rt.workload] = why
            elif not why and before is not None:
                logger.warning("%s: its output can be read again", rt.workload)
                del self.unreadable[rt.workload]
        self.metrics.unreadable.set(len(self.unreadable))

    async def _conclude_replaced(self, rt: WorkloadRuntime, job: workloads.JobSnapshot) -> None:
        """The attempt was replaced while its crash window was still settling: judge that evidence now,
        on the old attempt. A workload's own restart policy can start the next attempt within a
        second of the failure (a PyTorchJob's re-created pod), before the window settles; dropping
        the old detector then would lose the anomaly and leave the failed node in place."""
        assert rt.detector is not None
        if not rt.detector.settling:
            return
        for anomaly in rt.detector.on_exit(job.model_copy(update={"attempt": rt.detector_attempt})):
            await self._handle(rt, anomaly)

    async def _drain(self, rt: WorkloadRuntime) -> None:
        await self._feed_batch(rt, await self._read(rt))

    async def _read_round(self, runtimes: Sequence[WorkloadRuntime]) -> list[list[tuple[sources.Followed,
                                                                                       list[signals.LogLine]]]]:
        """``_read`` of every workload; the output files of all of them in one batch of reads
        (``tailbook.read_books``: a few thread hand-offs per round, not one per file)."""
        files: list[int] = []
        books: list[tailbook.TailBook] = []
        others: list[int] = []
        for i, rt in enumerate(runtimes):
            if rt.detector is not None and isinstance(rt.book, tailbook.TailBook):
                files.append(i)
                books.append(rt.book)
            else:
                others.append(i)
        got, rest = await asyncio.gather(tailbook.read_books(books),
                                         asyncio.gather(*(self._read(runtimes[i]) for i in others)))
        out: list[list[tuple[sources.Followed, list[signals.LogLine]]]] = [[] for _ in runtimes]
        for i, batch in zip(files, got, strict=True):
            out[i] = [(f, lines) for f, lines in batch]
        for i, theirs in zip(others, rest, strict=True):
            out[i] = theirs
        return out

    async def _read(self, rt: WorkloadRuntime) -> list[tuple[sources.Followed, list[signals.LogLine]]]:
        """New lines of the workload's files; nothing while none of its attempts runs (see
        ``TailBook.observe_ends``): those lines belong to an earlier attempt."""
        if rt.detector is None:
            await rt.book.observe_ends()
            return []
        try:
            return await rt.book.read()
        except OSError as exc:
            logger.warning("cannot read the output of %s: %s", rt.workload, exc)
            return []

    async def _feed_batch(
        self, rt: WorkloadRuntime, batch: list[tuple[sources.Followed, list[signals.LogLine]]], *, tick: bool = True
    ) -> None:
        """Feed the lines, then one detector tick (``tick=False``: the caller ticks, as the tailing
        round does); the time-driven checks run once per batch, not after every line."""
        fed = False
        for f, lines in batch:
            for line in lines:
                rt.book.consume(f, line)  # first: a decision this line brings about stores it as read
                await self._feed(rt, line)
                fed = True
        if tick and fed and rt.detector is not None:
            for anomaly in rt.detector.tick():
                await self._handle(rt, anomaly)

    def _first_run_watched(self, job: workloads.JobSnapshot) -> bool:
        """The job's first run (attempt 0) started while this engine was running: its output file
        holds nothing of an earlier attempt of the job."""
        return job.attempt == 0 and job.started_at is not None and job.started_at >= self.started_second

    async def _place_at_attempt_start(self, rt: WorkloadRuntime, job: workloads.JobSnapshot) -> None:
        """The attempt runs, first seen waiting: its output starts where the files ended before it started.

        A job's first run that started while we watched, whose every look came after its start
        (the listing said PENDING, the file was looked at a moment later, the job had begun
        printing in between), is placed as first sight of a running first attempt is: from the
        file itself (mtime, timestamps), else from byte 0. Skipping to our first look would drop
        the attempt's first lines, e.g. an Xid printed at once."""
        for f, placed in rt.book.place_at_start(job.started_at):
            how = placed
            if isinstance(f, tailbook.Followed) and f.basis == "unknown" and self._first_run_watched(job):
                found = await rt.book.run(functools.partial(
                    resume.running_start, f.path, started_at=job.started_at, previous=None, previous_is_last=False,
                    now=self.clock.now()))
                if found is not None:
                    if found.basis == "unknown":
                        found = resume.Start(tailer.TailPosition(f.path, None, 0, 0), "first_attempt")
                    f.tailer.skip_to(found.position)
                    f.consumed, f.basis = found.position, found.basis
                    how = f"{f.path} {found.describe()} (every look came after the start of the first run)"
            logger.info("%s attempt %d: reading %s", rt.workload, job.attempt, how)

    async def _feed(self, rt: WorkloadRuntime, line: signals.LogLine) -> None:
        clean = sanitize.clean_line(line.text)
        if clean != line.text:
            line = signals.LogLine(clean, line.lineno, line.received_at, line.source, line.node, line.rank)
        if rt.checkpoint_re is not None and rt.checkpoint_re.search(clean):
            attempt = rt.detector_attempt if rt.detector_attempt >= 0 else rt.job.attempt
            rt.history = ledger.record_checkpoint(rt.history, attempt, line.received_at)
            await self.store.record_attempt(workload=rt.workload, attempt=attempt, at=line.received_at,
                                            checkpoint_saved=True, checkpoint_at=line.received_at)
            await self.journal.checkpoint(rt.workload, attempt, line.received_at)
        if rt.detector is not None:
            for anomaly in rt.detector.feed(line, tick=False):
                await self._handle(rt, anomaly)
            sample = rt.detector.last_progress if rt.detector is not None else None
            if sample is not None and self.journal.progress_due(rt.workload, rt.detector_attempt, sample):
                await self.journal.progress(rt.workload, rt.detector_attempt, sample)

    # ------------------------------------------------------------------ the decision

    async def _handle(self, rt: WorkloadRuntime, anomaly: anomalies.Anomaly) -> None:
        """Anomaly -> audit -> verdict -> audit -> advice; the executor runs as a task."""
        if rt.spec is None or rt.detector is None:
            return
        attempt = rt.detector.attempt
        if await self._own_effect(rt, anomaly, attempt):
            return
        change, _ = await self._not_ours(rt, attempt)
        if change is not None and own_actions.is_teardown(anomaly):
            return  # the teardown of somebody else's cancel, requeue or time limit: their decision, recorded
        now = self.clock.now()
        anomaly = alloc.confine_anomaly(anomaly, await self._allocation(rt))
        await self.store.record_anomaly(workload=rt.workload, attempt=attempt, anomaly=anomaly, at=now)
        rt.last_anomaly = anomaly
        await self._notify(rt, vocab.AuditKind.ANOMALY, anomaly.model_dump(mode="json"))
        verdict = await self._attribute(rt, anomaly, attempt, now)
        if self._awaits_metrics(rt, anomaly, verdict, attempt):
            rt.awaiting_metrics = True
            rt.task = self._spawn(self._after_metrics(rt, anomaly, attempt), f"await-metrics:{rt.workload}:{attempt}")
            return
        await self._record_verdict(rt, verdict, attempt)

        if change is not None:
            return  # evidence only: somebody else's decision ended the attempt (recorded by _not_ours)
        earlier = rt.advised.get(attempt)
        if earlier is not None and not _stronger(verdict, earlier):
            logger.info("%s attempt %d: already advised (%s); %s recorded as evidence only", rt.workload, attempt,
                        earlier, anomaly.category.value)
            return
        if rt.task is not None and not rt.task.done():
            # The previous generation is still being carried out; a new one would race it. Decide
            # after it, in its task, so that detection of every other workload goes on meanwhile.
            rt.deferred.append((anomaly, verdict, attempt))
            return
        item = await self._decide(rt, anomaly, verdict, attempt, save_tail=True)
        if item is not None:
            rt.task = self._spawn(self._carry_out(rt, item), f"recover:{rt.workload}:{attempt}:{item.generation}")

    async def _record_verdict(self, rt: WorkloadRuntime, verdict: verdicts.Verdict, attempt: int) -> None:
        await self.store.record_verdict(workload=rt.workload, attempt=attempt, verdict=verdict, at=self.clock.now())
        rt.last_verdict = verdict
        await self._notify(rt, vocab.AuditKind.VERDICT, verdict.model_dump(mode="json"))
        rt.history = ledger.record_anomaly(rt.history, attempt, verdict.category, verdict.attribution)

    def _awaits_metrics(self, rt: WorkloadRuntime, anomaly: anomalies.Anomaly, verdict: verdicts.Verdict,
                        attempt: int) -> bool:
        """Whether to give the GPU metrics time before deciding on this crash: the job's log could not
        say (unknown or system), the metrics answered without a fault, and the fault, if there was one,
        may still be on its way (DCGM samples and Prometheus scrapes every 15-30 s, a crash is read
        within a second). Only the first decision of an attempt waits, and only one at a time."""
        if self.gpu_metrics is None or self.gpu_metrics.config.wait_s <= 0 or attempt in rt.advised:
            return False
        if rt.task is not None and not rt.task.done():
            return False
        answered = any(s.name == gpu_metrics.SOURCE and s.state == evidence_model.SourceState.USED
                       for s in verdict.sources)
        return (answered and anomaly.symptom == vocab.Symptom.CRASH and not any(f.fault for f in verdict.node_evidence)
                and verdict.attribution in (vocab.Attribution.UNKNOWN, vocab.Attribution.SYSTEM))

    async def _after_metrics(self, rt: WorkloadRuntime, anomaly: anomalies.Anomaly, attempt: int) -> None:
        """The wait of ``_awaits_metrics``, in the workload's recovery task (detection of every other
        workload goes on; this workload's later anomalies wait for it); then the verdict and the
        decision as ``_handle`` makes them, and the recovery."""
        assert self.gpu_metrics is not None
        try:
            await asyncio.sleep(self.gpu_metrics.config.wait_s)
            if rt.spec is None:
                return
            verdict = await self._attribute(rt, anomaly, attempt, self.clock.now())
            await self._record_verdict(rt, verdict, attempt)
            item = await self._decide(rt, anomaly, verdict, attempt)
        finally:
            rt.awaiting_metrics = False
        await self._carry_out(rt, item)

    async def _own_effect(self, rt: WorkloadRuntime, anomaly: anomalies.Anomaly, attempt: int) -> bool:
        """True (and recorded as evidence of that action) when ``anomaly`` is only the teardown that our
        own requeue/cancel of this attempt caused: the effects of our actions are not failures."""
        now = self.clock.now()
        ours = await self.store.actions_by_operation(list(own_actions.TERMINATING), since=now - own_actions.WINDOW_S)
        row = own_actions.effect_of(anomaly, workload=rt.workload, attempt=attempt, ours=ours)
        if row is None:
            return False
        advised = rt.last_advice.action.value if rt.last_advice and rt.last_advice.generation == row.generation else ""
        payload = own_actions.effect_payload(anomaly, row, advised)
        await self.store.record_effect(workload=rt.workload, attempt=attempt, payload=payload, at=now)
        await self._notify(rt, vocab.AuditKind.ACTION, payload)
        logger.info("%s attempt %d: %s is the effect of our %s (generation %d), recorded as such, not as a failure",
                    rt.workload, attempt, anomaly.category.value, row.operation.value, row.generation)
        return True

    async def _decide(
        self, rt: WorkloadRuntime, anomaly: anomalies.Anomaly, verdict: verdicts.Verdict, attempt: int,
        *, save_tail: bool = False,
    ) -> advice.Advice | None:
        """Policy -> the next advice generation, recorded before anything is done; None if it asks nothing.

        ``save_tail``: the read positions are stored with the advice, in its transaction, so a
        restart never reads the lines behind a recorded decision again (and, without the advice,
        reads them again). Deferred decisions do not: lines read since may wait on them.
        """
        assert rt.spec is not None
        change, job = await self._not_ours(rt, attempt)
        if change is not None:
            return None  # somebody else's decision ended the attempt meanwhile: recorded, never answered
        generation = rt.history.advice_generation + 1
        now, history = self.clock.now(), rt.history
        partition_nodes = await self._partition_nodes(job.partition)
        own = await self.store.own_exclusions(rt.workload)
        placed = await self._allocation(rt)
        item = decide.decide(
            rt.spec, workload=rt.workload, attempt=attempt, anomaly=anomaly, verdict=verdict, history=history,
            job=job, generation=generation, now=now, policy_name=rt.policy_name,
            partition_nodes=partition_nodes, own_exclusions=own, allocation=placed,
            node_actions=self.node_actions,
        )
        if rt.route is not None:
            item = item.model_copy(update={"route": rt.route})
        await self.journal.decided(verdict=verdict, at=now, job=job, history=history, generation=generation,
                                   partition_nodes=partition_nodes, own_exclusions=own, allocation=sorted(placed),
                                   route=rt.route, item=item, node_actions=self.node_actions)
        rt.history = ledger.record_advice(rt.history, attempt, generation, item.action, item.exclude_nodes)
        # An advice that asks for nothing (a recorded straggler) must not keep a later real failure
        # of the same attempt from being advised.
        acted = item.action != vocab.AdviceAction.NONE
        rt.advised[attempt] = verdict.attribution.value if acted else vocab.Attribution.NONE.value
        files = rt.book.unsaved() if save_tail and rt.detector is not None else []
        # durable before anything is done
        await self.store.record_advice(item, at=self.clock.now(), tail=self._tail_records(rt, files))
        rt.book.mark_saved(files)
        rt.last_advice = item
        rt.disposition = vocab.Disposition.PENDING
        await self._notify(rt, vocab.AuditKind.ADVICE, item.model_dump(mode="json"))
        if not acted:
            rt.disposition = vocab.Disposition.CONVERGED
            return None
        return item

    async def _carry_out(self, rt: WorkloadRuntime, item: advice.Advice | None) -> None:
        """Carry out ``item``, then any decision that waited for it (stronger evidence meanwhile)."""
        while True:
            if item is not None:
                disposition = await self.executor.reconcile(item)
                rt.disposition = disposition
                outcome: dict[str, object] = {"generation": item.generation, "disposition": disposition.value}
                await self._notify(rt, vocab.AuditKind.OUTCOME, outcome)
                logger.info("%s attempt %d generation %d: %s -> %s", item.workload, item.attempt, item.generation,
                            item.action.value, disposition.value)
            if not rt.deferred or rt.spec is None:
                return
            anomaly, verdict, attempt = rt.deferred.popleft()
            earlier = rt.advised.get(attempt)
            if earlier is not None and not _stronger(verdict, earlier):
                # queued while a decision of the attempt was pending (e.g. waiting for GPU metrics)
                # and it came out at least as strong: evidence only
                item = None
                continue
            item = await self._decide(rt, anomaly, verdict, attempt)

    async def _attribute(
        self, rt: WorkloadRuntime, anomaly: anomalies.Anomaly, attempt: int, now: float
    ) -> verdicts.Verdict:
        assert rt.spec is not None
        rule = lemon.LemonRule(rt.spec.exclusion.lemon_node_threshold, rt.spec.exclusion.lemon_node_window)
        history = lemon.NodeHistory(
            implications=[
                lemon.Implication(node=i.node, at=i.at, workload=i.workload, attempt=i.attempt,
                                  category=_category(i.category))
                for i in await self.store.node_history(since=now - rule.window_s)
            ]
        )
        placed = await self._allocation(rt)
        job_nodes = list(rt.job.nodes)
        verdict = rules.attribute(
            anomaly, node_history=history, lemon_rule=rule, now=now, workload=rt.workload, attempt=attempt,
            job_nodes=job_nodes, allocation=placed,
        )
        found = await self._node_evidence(rt, attempt, now)
        verdict = node_evidence.apply(verdict, found, placed)
        service = rt.spec.attribution
        if service.url:
            verdict = await external.ExternalAttribution(service.url, service.timeout).attribute(anomaly, verdict)
        verdict = alloc.confine_verdict(verdict, anomaly, placed)  # an external service is held to it too
        await self.journal.attributed(
            workload=rt.workload, attempt=attempt, at=now, policy=rt.policy_name, spec=rt.spec, anomaly=anomaly,
            implications=history.implications, allocation=sorted(placed), job_nodes=job_nodes,
            node_evidence=found, external=bool(service.url), verdict=verdict)
        return verdict

    async def watch_metrics(self) -> None:
        """One round of metric-based detection: a hardware fault in the GPU metrics of a node of a
        running opted-in job is an anomaly even when the job's log says nothing. Each fault is raised
        once per attempt; the policy's ``detection.gpuMetricAction`` decides whether it is acted on."""
        if self.gpu_metrics is None:
            return
        now = self.clock.now()
        for rt in list(self.runtimes.values()):
            job = rt.job
            if (rt.spec is None or rt.detector is None or job.state != workloads.JobState.RUNNING
                    or rt.detector.attempt != job.attempt or not job.nodes or job.started_at is None):
                continue
            found = await self.gpu_metrics.window(job.nodes, job.started_at, now)
            seen = rt.metric_faults.setdefault(job.attempt, set())
            fresh = [f for f in found.faults() if f.key not in seen]
            if not fresh:
                continue
            seen.update(f.key for f in fresh)
            await self._handle(rt, metric_anomaly(fresh, now))

    async def _node_evidence(self, rt: WorkloadRuntime, attempt: int, now: float) -> evidence_model.NodeEvidence:
        """What GPU metrics and the scheduler's node state say about the attempt's nodes, over the
        attempt's window (its start to now); each source answers or says why it cannot."""
        job = rt.job
        nodes = list(job.nodes) if job.attempt == attempt else []
        if not nodes:
            nodes = sorted(await self.store.allocation(rt.workload))
        start = job.started_at if job.attempt == attempt and job.started_at else None
        metrics: Awaitable[evidence_model.NodeEvidence]
        if self.gpu_metrics is None:
            metrics = _ready(_source(gpu_metrics.SOURCE, evidence_model.SourceState.NOT_CONFIGURED,
                                     "no --prometheus-url"))
        elif start is None:
            metrics = _ready(_source(gpu_metrics.SOURCE, evidence_model.SourceState.UNAVAILABLE,
                                     f"the scheduler gives no start time for attempt {attempt}"))
        else:
            metrics = self.gpu_metrics.window(nodes, start, now)
        parts = await asyncio.gather(metrics, self._node_state(nodes),
                                     *(_node_source(s, nodes, start, now) for s in self.node_sources))
        return evidence_model.NodeEvidence(findings=[f for p in parts for f in p.findings],
                                           sources=[s for p in parts for s in p.sources])

    async def _node_state(self, nodes: Sequence[str]) -> evidence_model.NodeEvidence:
        """The scheduler's view of ``nodes``: drained, failed or down for someone else's reason."""
        name = f"{self.scheduler.name}-nodes"
        try:
            snapshots = await self.scheduler.list_nodes()
        except Exception as exc:  # evidence only: an outage must not stop attribution
            return _source(name, evidence_model.SourceState.UNAVAILABLE, f"{type(exc).__name__}: {exc}")
        findings = node_evidence.node_state_findings(nodes, snapshots, source=name,
                                                     our_prefix=base.OUR_REASON_PREFIX)
        return _source(name, evidence_model.SourceState.USED, findings=findings)

    async def _fresh_job(self, rt: WorkloadRuntime) -> workloads.JobSnapshot:
        """A fresh read of the job for a decision (``rt.job`` when the scheduler cannot answer). It does
        not replace ``rt.job``: that is discovery's view, and ``_update`` tells the job's transitions
        (its end, a new attempt) from it; a read here must not hide them."""
        try:
            return await self.scheduler.get_job(rt.job.job_id)
        except base.SchedulerError as exc:
            logger.warning("cannot re-read job %s before deciding: %s", rt.job.job_id, exc)
        return rt.job

    async def _partition_nodes(self, partition: str) -> int | None:
        """Usable nodes of the job's partition(s), for the "enough nodes left" check of exclusions."""
        try:
            nodes = await self.scheduler.list_nodes()
        except base.SchedulerError:
            return None
        return usable_partition_nodes(nodes, partition)

    async def _blast_limit(self, item: advice.Advice) -> limits.LimitReport:
        """Every blast-radius limit and administrator's cap against ``item`` (``policy.blast_radius.decide``:
        degraded to the advice without its drains when only they are refused).

        Action mode: one serialised decision with the reservation of what it allows
        (``AuditStore.reserve_limits``), fenced with this workload's token, counting the operations
        carried out and those reserved by generations in flight; a cap that blocks opens the breaker.
        Monitor mode: a prediction from the operations carried out plus those earlier Monitor advice of the
        same policy would have carried out; nothing is reserved and no breaker opens."""
        rt = self.runtimes.get(item.workload)
        spec = rt.spec if rt is not None else None
        if spec is None:  # e.g. advice resumed by recover() before discovery ran
            policy = self.policies.get(item.policy or None)
            if policy is None:
                gone = f"policy {item.policy or loader.DEFAULT_NAME!r} no longer exists"
                return limits.LimitReport(checks=[limits.LimitCheck(
                    limit="policy", maximum=0, planned=blast_radius.planned_operations(item), would_block=True,
                    reason=gone)])
            spec = policy.spec
        now = self.clock.now()
        caps = self.settings.admin_caps()
        nodes = await self.scheduler.list_nodes()
        ours = {n.name for n in nodes if n.drained and n.reason.startswith(base.OUR_REASON_PREFIX)}
        if item.mode is vocab.Mode.MONITOR:
            rows = await self.store.actions_by_operation(list(actions.Operation), since=now - blast_radius.WINDOW_S)
            recent = await counted_operations(rows, item, self.store.get_advice)
            name = item.policy or loader.DEFAULT_NAME
            return blast_radius.decide(
                spec, advice=item, recent_actions=recent, nodes=nodes, drained_by_us=ours, now=now, caps=caps,
                counted=f"operations carried out, plus those Monitor advice of policy {name!r} would have carried out")

        async def decide(rows: Sequence[actions.ActionRecord],
                         live: Sequence[limits_ledger.Reservation]) -> limits_ledger.Decision:
            recent = await counted_operations(rows, item, None)
            recent.extend((r.at, operation) for r in live for operation in r.operations)
            report = blast_radius.decide(
                spec, advice=item, recent_actions=recent, nodes=nodes, now=now, caps=caps,
                drained_by_us=ours | {node for r in live for node in r.drains},
                counted="operations carried out or in flight (intents, and limits passed by advice not closed yet)")
            carried = blast_radius.without_drains(item) if report.refused_drains else item
            operations = [carried.action.value] * int(carried.action is not vocab.AdviceAction.NONE)
            operations += [actions.Operation.DRAIN_NODE.value] * len(carried.drain_nodes)
            return limits_ledger.Decision(report, operations, carried.nodes_taken_out)

        return await self.store.reserve_limits(
            item.workload, item.attempt, item.generation, decide, at=now, since=now - blast_radius.WINDOW_S,
            fence=self.executor.fence.token(item.workload), breaker=switch_mod.BREAKER)

    async def sweep(self) -> None:
        """Watchdog: give up on advice past its deadline, releasing any hold of ours; then release
        requeued jobs whose retry backoff (``Advice.release_at``) has passed; then resume the nodes
        we drained whose policy's ``exclusion.undrainAfter`` has passed (``act.undrain``)."""
        paused = await self.switch.blocked()
        if paused != self._paused:
            if paused and self.settings.allow_action:
                logger.warning("actions are off: %s", paused)
            elif self._paused and self.settings.allow_action:
                logger.warning("actions are allowed again (policies in Action mode act)")
            self._paused = paused
        self.metrics.actions_paused.set(1 if paused else 0)
        await self.executor.watchdog.sweep()
        now = self.clock.now()
        for item in await self.store.pending_advice():
            stalled = (item.workload, item.attempt, item.generation) in self.executor.stalled
            if not self._mine(item.workload) or (
                    not stalled and (item.release_at is None or now < item.release_at)):
                continue
            rt = self.runtimes.get(item.workload)
            if rt is None:
                await self.executor.reconcile(item)
            elif rt.task is None or rt.task.done():
                rt.task = self._spawn(self._carry_out(rt, item), f"release:{item.workload}:{item.generation}")
        if self.shards is None or 0 in self.shards.leases.held():  # node housekeeping: shard 0's holder
            await self.undrainer.sweep()

    def _undrain_rule(self, policy_name: str) -> undrain.UndrainRule | None:
        """``exclusion.undrainAfter`` and the effective mode of the policy that drained a node."""
        policy = self.policies.get(policy_name or None)
        if policy is None:
            return None
        acting = self.settings.allow_action and self._paused is None and policy.spec.mode == vocab.Mode.ACTION
        return undrain.UndrainRule(policy.spec.exclusion.undrain_after,
                                   vocab.Mode.ACTION if acting else vocab.Mode.MONITOR)

    async def _notify(self, rt: WorkloadRuntime, kind: str, payload: dict[str, object]) -> None:
        rt.recent.append({"kind": kind, "at": self.clock.now(), "payload": payload})
        for listener in self.listeners:
            try:
                await listener(kind, rt.workload, payload)
            except Exception:
                logger.exception("listener failed on %s %s", kind, rt.workload)


_STRENGTH = {
    vocab.Attribution.HARDWARE.value: 3,
    vocab.Attribution.SYSTEM.value: 2,
    vocab.Attribution.APPLICATION.value: 1,
    vocab.Attribution.UNKNOWN.value: 0,
    vocab.Attribution.NONE.value: -1,
}


_ALREADY_RECORDED = whose.Change(whose.PERSON, "recorded", "somebody else's decision, already recorded")
"""What ``Engine._note_ending`` answers for an attempt whose change is on record already."""


def usable_partition_nodes(nodes: Sequence[workloads.NodeSnapshot], partition: str) -> int | None:
    """How many of ``nodes`` are usable (not drained, down, failed, ...) in ``partition``.

    ``partition`` may be a comma list (a pending job submitted to several); a node counts when it
    is in any of them. Nodes that name no partition count everywhere. None when none is usable
    or known, which turns the check off rather than refusing every exclusion.
    """
    wanted = {p for p in partition.split(",") if p}
    return sum(
        1 for n in nodes if n.usable and (not wanted or not n.partitions or wanted & set(n.partitions))
    ) or None


async def counted_operations(
    rows: Sequence[actions.ActionRecord],
    item: advice.Advice,
    get_advice: Callable[[str, int, int], Awaitable[advice.Advice | None]] | None,
) -> list[tuple[float, str]]:
    """The (time, operation) pairs the actions-per-hour window of ``item`` counts, from action rows.

    One operation per carried-out advice generation (a requeue with exclusions is three scheduler
    calls but one recovery), plus one per drained node, as ``blast_radius.planned_operations``
    counts. Action mode counts what was carried out or is in flight (``done`` and ``intent`` rows, every
    workload and policy; the generations that passed their limits and wrote no row yet are counted
    from the store's ledger, ``store.ledger``).
    Monitor mode (``get_advice`` given) predicts Action mode: the operations carried out for
    real, plus the ones earlier Monitor advice of the same policy would have carried out (rows
    ``skipped: monitor mode``, not those that would have been blocked themselves): had the
    policy been in Action mode, those would be in the window now. ``item``'s own rows never count.
    """
    recent: list[tuple[float, str]] = []
    seen: set[tuple[str, int, int]] = set()
    policy_of: dict[tuple[str, int, int], str | None] = {}
    own = (item.workload, item.attempt, item.generation)
    for r in rows:
        key = (r.workload, r.attempt, r.generation)
        if key == own:
            continue
        if r.status not in (actions.ActionStatus.DONE, actions.ActionStatus.INTENT):
            if get_advice is None or r.status != actions.ActionStatus.SKIPPED or r.error != executor_mod.MONITOR_SKIP:
                continue
            if key not in policy_of:
                earlier = await get_advice(*key)
                policy_of[key] = earlier.policy if earlier is not None else None
            if policy_of[key] != item.policy:
                continue
        if r.operation == actions.Operation.DRAIN_NODE:
            recent.append((r.created_at, r.operation.value))
        elif key not in seen:
            seen.add(key)
            recent.append((r.created_at, r.operation.value))
    return recent


def _stronger(verdict: verdicts.Verdict, earlier: str) -> bool:
    """A second advice for the same attempt only when the new verdict is stronger evidence."""
    return _STRENGTH.get(verdict.attribution.value, 0) > _STRENGTH.get(earlier, 0)


def _has_run(job: workloads.JobSnapshot) -> bool:
    """Whether the job's current attempt has started (so its output file may hold its lines).

    Pending and requeued (``PENDING+COMPLETING`` included) mean the current attempt has not
    started yet: what the file holds belongs to earlier attempts.
    """
    return job.state not in (workloads.JobState.PENDING, workloads.JobState.REQUEUED)


def _position(row: audit.TailRecord) -> tailer.TailPosition:
    return tailer.TailPosition(row.path, row.inode, row.offset, row.lineno, row.fingerprint)


def _tasks_per_node(job: workloads.JobSnapshot) -> int | None:
    """The rank layout: even tasks per node, or one per node when the scheduler did not say."""
    if job.num_tasks is None:
        return 1 if job.nodes else None
    return job.tasks_per_node


def _category(value: str) -> vocab.Category:
    try:
        return vocab.Category(value)
    except ValueError:
        return vocab.Category.NONE


def metric_anomaly(faults: Sequence[evidence_model.Finding], now: float) -> anomalies.Anomaly:
    """An anomaly from hardware faults in the GPU metrics (no log line): evidence per fault."""
    items = [
        anomalies.Evidence(line=0, text=f.text, pattern=evidence_model.METRIC_FAULT_PATTERN, source=f.source, at=f.at,
                           node=f.node, gpu=f.gpu, xid=int(f.value) if f.signal == gpu_metrics.XID else None,
                           category=f.category, severity=vocab.Severity.FATAL)
        for f in faults
    ]
    first = faults[0]
    return anomalies.Anomaly(
        symptom=vocab.Symptom.CRASH, category=first.category if first.category != vocab.Category.NONE
        else vocab.Category.GPU_XID_HARDWARE, attribution_hint=vocab.Attribution.HARDWARE, evidence=items,
        suspect_nodes=list(dict.fromkeys(f.node for f in faults)), first_seen_at=first.at or now, detected_at=now,
        summary="hardware fault in the GPU metrics of a running job: " + "; ".join(f.text for f in faults[:3]),
    )


def _source(name: str, state: evidence_model.SourceState, reason: str = "", *,
            findings: Sequence[evidence_model.Finding] = ()) -> evidence_model.NodeEvidence:
    return evidence_model.NodeEvidence(findings=list(findings),
                                       sources=[evidence_model.SourceStatus(name=name, state=state, reason=reason)])


async def _node_source(source: sources.NodeSource, nodes: Sequence[str], start: float | None,
                       now: float) -> evidence_model.NodeEvidence:
    """One further node-evidence source; one that fails is recorded as unavailable, never raised."""
    try:
        return await source.window(nodes, start, now)
    except Exception as exc:  # evidence only: an outage must not stop attribution
        return _source(source.name, evidence_model.SourceState.UNAVAILABLE, f"{type(exc).__name__}: {exc}")


async def _ready(value: evidence_model.NodeEvidence) -> evidence_model.NodeEvidence:
    return value


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error("task %s failed", task.get_name(), exc_info=task.exception())


E = TypeVar("E", bound=enum.Enum)


def _enum(kind: type[E], value: str | None) -> E | None:
    """A stored enum value, or None when absent or no longer known (a value of a newer release)."""
    if value is None:
        return None
    try:
        return kind(value)
    except ValueError:
        return None
