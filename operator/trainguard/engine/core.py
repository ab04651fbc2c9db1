"""The engine facade: wires the step modules over one scheduler and runs their timers.

Place: below the shells (``cli.run``, the standalone runner; ``k8s.operator``, the Kubernetes
operator, one engine per leadership term; both build it with ``engine.assemble``) and above the
step modules of this package, which do the work:

- ``tracking``: discovery rounds, tracking each opted-in job and following its attempts;
- ``tailing``: the tailing and metrics rounds, lines into detectors;
- ``decision``: anomaly -> verdict -> advice, recorded before anything is done;
- ``recovery``: the one ``RecoveryRunner`` that carries advice out, resumes pending advice and
  holds each to the limits; the watchdog sweep;
- ``policies``, ``restore``, ``placement``, ``evidence``, ``theirs``: what those ask for;
- ``runtime``: the ``WorkloadRuntime`` per workload that all of them share.

The facade owns the table of timers (``run``), the shells' seams (policy and override updates,
``notify``, ``abort``) and nothing else.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass

from trainguard import health as health_mod
from trainguard import settings as settings_mod
from trainguard import shards as shards_mod
from trainguard.act import executor as executor_mod
from trainguard.act import ports as act_ports
from trainguard.act import undrain
from trainguard.detect import catalog as catalog_mod
from trainguard.engine import decision as decision_mod
from trainguard.engine import evidence as evidence_mod
from trainguard.engine import placement as placement_mod
from trainguard.engine import policies as policies_mod
from trainguard.engine import recovery, restore, runtime, tailing, theirs, timers, tracking
from trainguard.journal import recorder as journal_mod
from trainguard.model import clock, tasks, vocab
from trainguard.observe import metrics as metrics_mod
from trainguard.observe import scorecard_watch
from trainguard.policy import loader
from trainguard.schedulers import base
from trainguard.signals import fileio, gpu_metrics, sources
from trainguard.store import audit
from trainguard.store import journal as journal_store

logger = runtime.logger


@dataclass(frozen=True)
class Timer:
    """One row of the table of timers: a round of ``work`` every ``interval`` s, as a task named ``name``;
    ``reaches``: the dependencies a successful round proves reachable (``timers.every``)."""

    name: str
    interval: float
    work: timers.Work
    reaches: tuple[str, ...] = ()


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
        listeners: Sequence[runtime.Listener] = (),
        health: health_mod.Health | None = None,
        fence: act_ports.Fence = act_ports.ALWAYS_LEADER,
        log_books: sources.BookFactory = sources.file_books,
        gpu_metrics_: gpu_metrics.GpuMetrics | None = None,
        journal: journal_mod.Recorder | None = None,
        node_sources: Sequence[sources.NodeSource] = (),
        shards: shards_mod.Ownership | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.store = store
        self.catalog = catalog
        self.clock = clock_
        self.settings = settings
        self.shards = shards
        """With ``--shards N``: the shards this replica holds; it tracks and acts on their workloads only,
        and is the executor's fence (each mutation fenced on its workload's shard; ``shards.py``)."""
        self.journal = journal if journal is not None else journal_mod.Recorder(
            journal_store.JournalStore(store.sql_engine, retention_s=settings.journal_retention_s,
                                       max_bytes=settings.journal_max_bytes), clock_)
        """The signal journal: each decision's inputs, for replay and backtest (``journal/``)."""
        self.health = health if health is not None else health_mod.Health()
        """Reachability of the scheduler and the store, learned from the timer loops' rounds."""
        self.runtimes: runtime.Runtimes = {}
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
        self._tasks: set[asyncio.Task[None]] = set()
        """Every task of this engine (timers and recoveries), held until it ends."""
        self._timers: dict[str, asyncio.Task[None]] = {}
        self.file_pool = fileio.FilePool()
        """Threads for output-file I/O: a hung NFS/Lustre read never blocks the event loop."""

        # The step modules, bottom up; each is handed exactly what it uses.
        self.reporter = runtime.Reporter(clock_, listeners)
        self.resolver = policies_mod.PolicyResolver(policies, catalog, allow_action=settings.allow_action,
                                                    runtimes=self.runtimes)
        self.evidence = evidence_mod.NodeEvidence(scheduler, store, gpu_metrics_=gpu_metrics_,
                                                  node_sources=node_sources)
        self.theirs = theirs.Theirs(scheduler, store, clock_, self.reporter)
        self.placement = placement_mod.Placement(store, clock_, started_second=self.started_second)
        self.recovery = recovery.RecoveryRunner(
            scheduler, store, clock_, settings=settings, runtimes=self.runtimes, policies=self.resolver,
            reporter=self.reporter, metrics=self.metrics, fence=shards if shards is not None else fence,
            shards=shards, keep=self._tasks,
            # Late-bound (the decision is made next): the decision hands the runner each advice, the
            # runner asks the decision for the decisions that waited for a recovery in flight.
            next_deferred=lambda rt: self.decision.next_deferred(rt))  # noqa: PLW0108
        self.decision = decision_mod.Decision(
            scheduler, store, clock_, journal=self.journal, reporter=self.reporter, evidence=self.evidence,
            theirs_=self.theirs, runner=self.recovery, node_actions=sorted(base.node_actions(scheduler)))
        self.tailing = tailing.Tailing(
            store, clock_, settings=settings, runtimes=self.runtimes, journal=self.journal, metrics=self.metrics,
            placement=self.placement, decision=self.decision, evidence=self.evidence)
        self.tracking = tracking.Tracking(
            scheduler, store, clock_, settings=settings, runtimes=self.runtimes, journal=self.journal,
            log_books=log_books, file_pool=self.file_pool, shards=shards, started_second=self.started_second,
            policies=self.resolver, restore_=restore.Restore(scheduler, store), placement=self.placement,
            tailing_=self.tailing, decision=self.decision, theirs_=self.theirs, runner=self.recovery)

    # ------------------------------------------------------------------ what the shells read

    @property
    def policies(self) -> loader.PolicySet:
        return self.resolver.policies

    @property
    def executor(self) -> executor_mod.Executor:
        return self.recovery.executor

    @property
    def undrainer(self) -> undrain.Undrainer:
        return self.recovery.undrainer

    @property
    def gpu_metrics(self) -> gpu_metrics.GpuMetrics | None:
        """DCGM evidence from Prometheus/VictoriaMetrics (``--prometheus-url``); None: not configured."""
        return self.evidence.gpu_metrics

    @property
    def unreadable(self) -> dict[str, str]:
        """Workload -> why its output cannot be read now (``Tailing.note_unreadable``)."""
        return self.tailing.unreadable

    def workload_states(self) -> list[str]:
        """The scheduler's state of every tracked workload (``trainguard_workloads``)."""
        return [rt.job.state.value for rt in self.runtimes.values()]

    def timer(self, name: str) -> asyncio.Task[None] | None:
        """The task of the running timer ``name`` (``Timer.name``), None before ``run`` started it."""
        return self._timers.get(name)

    # ------------------------------------------------------------------ the shells' seams

    def update_policies(self, policies: loader.PolicySet) -> None:
        """Swap the policy set (e.g. a RecoveryPolicy changed in Kubernetes); tracked workloads
        take the new effective policy at once, no restart needed. Their detectors keep running;
        detection settings apply from the next attempt."""
        self.resolver.update(policies)

    def set_mode_override(self, workload: str, mode: vocab.Mode | None) -> None:
        """A per-workload mode override (WorkloadRecovery spec); None removes it."""
        self.resolver.set_mode_override(workload, mode)

    def set_workload_overrides(self, workload: str, values: dict[str, object]) -> None:
        """Per-workload policy overrides from the shell, keyed like the opt-in comment's
        (``max-retries``, ``hang-timeout`` in seconds, ...); empty removes them. They apply on top of
        the comment's, by the same rules; detection settings apply from the next attempt."""
        self.resolver.set_workload_overrides(workload, values)

    async def notify(self, rt: runtime.WorkloadRuntime, kind: str, payload: dict[str, object]) -> None:
        """Hand a record of ``rt`` to the listeners, as the engine does after each audit record."""
        await self.reporter.notify(rt, kind, payload)

    # ------------------------------------------------------------------ one round of each timer

    async def recover(self) -> None:
        """On start: the watchdog releases leftover holds of ours; pending advice is resumed."""
        await self.recovery.recover()

    async def discover(self) -> None:
        """One discovery round: start tracking new jobs, follow requeues, settle finished jobs."""
        await self.tracking.discover()

    async def tail(self) -> None:
        """One tailing round: new lines into the detectors, then the moved read positions saved."""
        await self.tailing.tail()

    async def sweep(self) -> None:
        """The watchdog sweep: deadlines, retry backoffs passed, nodes due to be resumed."""
        await self.recovery.sweep()

    async def watch_metrics(self) -> None:
        """One round of metric-based detection (``Tailing.watch_metrics``)."""
        await self.tailing.watch_metrics()

    # ------------------------------------------------------------------ lifecycle

    def table(self) -> list[Timer]:
        """The timers ``run`` starts, after the start-up recovery."""
        s = self.settings
        table = [
            Timer("discovery", s.discovery_interval_s, self.discover, (health_mod.SCHEDULER,)),
            Timer("tailing", s.tail_interval_s, self.tail),
            Timer("crash-windows", tailing.CONCLUDE_INTERVAL_S, self.tailing.conclude_due),
            Timer("watchdog-sweep", s.sweep_interval_s, self.sweep, (health_mod.STORE,)),
            Timer("scorecard-watch", s.sweep_interval_s, self.scorecard_watch.sweep),
        ]
        if self.shards is not None:
            table.append(Timer("shard-leases", self.shards.leases.timing.renew_interval_s, self.shards.leases.step,
                               (health_mod.STORE,)))
        if self.gpu_metrics is not None:
            table.append(Timer("gpu-metrics", s.metrics_interval_s, self.watch_metrics))
        return table

    async def run(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set; then wait for in-flight recoveries to finish. Start-up recovery
        is retried (with backoff) until the scheduler and the store answer: nothing is decided before
        our own leftovers of a previous run are settled."""
        s = self.settings
        for work in ([self.shards.leases.step] if self.shards is not None else []) + [self.recover]:
            if not await timers.until_done(self.health, s.discovery_interval_s, s.max_backoff_s, work, stop,
                                           health_mod.STORE):
                self.metrics.stop_counting(self.workload_states)
                return
        for row in self.table():
            self._timers[row.name] = tasks.spawn(
                timers.every(self.health, row.interval, s.max_backoff_s, row.work, stop, *row.reaches),
                row.name, self._tasks)
        loops = list(self._timers.values())
        await stop.wait()
        for task in loops:
            task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        pending = [rt.task for rt in self.runtimes.values() if rt.task is not None and tasks.busy(rt.task)]
        if pending:
            await asyncio.wait(pending, timeout=30)
        try:  # the positions the last rounds moved: a restart resumes exactly here
            await self.placement.save(list(self.runtimes.values()))
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
        self.recovery.abort()
