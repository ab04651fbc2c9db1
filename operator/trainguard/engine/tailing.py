"""The signal rounds: new output lines (and GPU metrics) of every tracked workload into its detector.

Place: a step module of the engine, run by the facade's tailing and metrics timers, and by
tracking when an attempt ends or is replaced (``drain``, ``conclude_replaced``). Every anomaly a
detector raises goes to the decision (``decision.Decision.handle``). Each attempt gets its own
detector (``new_detector``) once it runs; lines of an attempt are judged on that attempt only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from trainguard import settings as settings_mod
from trainguard.detect import hosts, sanitize, stream
from trainguard.engine import decision as decision_mod
from trainguard.engine import evidence as evidence_mod
from trainguard.engine import placement as placement_mod
from trainguard.engine import runtime
from trainguard.journal import recorder as journal_mod
from trainguard.model import anomalies as anomaly_mod
from trainguard.model import clock, signals, vocab, workloads
from trainguard.observe import metrics as metrics_mod
from trainguard.policy import ledger
from trainguard.signals import loki, sources, tailbook, victorialogs
from trainguard.store import audit

logger = runtime.logger

YIELD_EVERY_S = 0.02
"""How long the tailing round feeds lines before it lets the event loop run the other tasks once."""
FEED_BUDGET_S = 0.2
"""How long one round feeds one workload's lines; the rest waits for the next round (``backlog``).
A 4,096-rank cascade is ~200,000 lines in a second, seconds of parsing: fed in one go it would hold
every other workload's lines (and their crash windows) back that long (issue 28, goal 4)."""

CONCLUDE_INTERVAL_S = 0.05
"""How often the open crash windows are checked between tailing rounds (``conclude_due``): a window
settles ``detection.settle`` after its first error line, and waiting for the next round's tick
instead added up to a round plus the tail interval (0.3-0.6 s in a cascade) to every crash."""

SHIPPED = frozenset({victorialogs.KIND, loki.SOURCE})
"""``LogBook.kind`` of the sources a shipper fills (``await_store_lines``)."""
STORE_POLL_S = 0.25
"""How often ``await_store_lines`` reads a log store again while it waits for an ended job's last rows."""

Batch = list[tuple[sources.Followed, list[signals.LogLine]]]
"""New lines of one workload, per file they were read from."""


class Tailing:
    """Reads every workload's new lines and feeds its detector."""

    def __init__(
        self, store: audit.AuditStore, clock_: clock.Clock, *, settings: settings_mod.EngineSettings,
        runtimes: runtime.Runtimes, journal: journal_mod.Recorder, metrics: metrics_mod.EngineMetrics,
        placement: placement_mod.Placement, decision: decision_mod.Decision, evidence: evidence_mod.NodeEvidence,
    ) -> None:
        self.store = store
        self.clock = clock_
        self.settings = settings
        self.runtimes = runtimes
        self.journal = journal
        self.metrics = metrics
        self.placement = placement
        self.decision = decision
        self.evidence = evidence
        self.positions_saved_at: float | None = None
        """When the tailing round last saved the moved read positions (``position_save_interval_s``)."""
        self.backlog: dict[str, Batch] = {}
        """Workload -> lines read but not yet fed (``FEED_BUDGET_S``): fed first, before its files are
        read again, so order holds and at most one read's worth waits per workload."""
        self.settling: set[str] = set()
        """Workloads whose crash window was open after their last batch: ``conclude_due`` looks at these."""
        self.unreadable: dict[str, str] = {}
        """Workload -> why its output cannot be read now (``note_unreadable``): such a workload is
        reported (log, ``trainguard_unreadable_workloads``, status), never silently unmonitored."""

    async def tail(self) -> None:
        """One tailing round over every tracked workload, then a detector tick each; then the
        read positions that moved are stored in one write."""
        runtimes = [rt for rt in self.runtimes.values() if rt.ready]
        for gone in [w for w in self.backlog if w not in self.runtimes]:
            del self.backlog[gone]
        for rt in runtimes:
            if (rt.detector is None and rt.spec is not None and rt.job.state == workloads.JobState.RUNNING
                    and rt.unwatched is None):
                await self.placement.at_attempt_start(rt, rt.job)
                self.new_detector(rt, rt.job)  # a policy now covers it (e.g. a RecoveryPolicy appeared)
        # Every file is read concurrently on the pool: a hung file holds up no other workload.
        batches = await self.read_round(runtimes)
        self.note_unreadable(runtimes)
        turn = time.monotonic()
        now = self.clock.now()
        for rt, batch in zip(runtimes, batches, strict=True):
            if time.monotonic() - turn >= YIELD_EVERY_S:
                # Let the other tasks run (tracking, its store round trips, decisions): a round over
                # 10,000 workloads runs for seconds on a busy machine, and every awaited statement
                # of the others would wait that long otherwise (issue 28: tracking 512 new jobs
                # took ~30 s, one round per round trip).
                await asyncio.sleep(0)
                turn = time.monotonic()
            pending = self.backlog.pop(rt.workload, None)
            if rt.closed:
                continue  # no longer tracked since the round began: its lines are nobody's now
            feeding = pending or batch
            rest = await self.feed_batch(rt, feeding, tick=False, budget_s=FEED_BUDGET_S)
            if rest:
                self.backlog[rt.workload] = rest
            fed = any(lines for _, lines in feeding)
            if rt.detector is not None and (fed or rt.detector.tick_due(now)):
                await self._handle(rt, rt.detector.tick())
                if rt.detector is not None and rt.detector.settling:
                    self.settling.add(rt.workload)
        now = self.clock.now()  # after the feeding, which may take a while
        if self.positions_saved_at is None or now - self.positions_saved_at >= self.settings.position_save_interval_s:
            self.positions_saved_at = now
            await self.placement.save(runtimes)
        await self.journal.flush()

    async def conclude_due(self) -> None:
        """Between rounds: conclude the crash windows that have settled (``CONCLUDE_INTERVAL_S``)."""
        for workload in list(self.settling):
            rt = self.runtimes.get(workload)
            if rt is None or rt.closed or rt.detector is None or not rt.detector.settling:
                self.settling.discard(workload)
                continue
            await self._handle(rt, rt.detector.conclude_due())
            if rt.detector is None or not rt.detector.settling:
                self.settling.discard(workload)

    async def _handle(self, rt: runtime.WorkloadRuntime, found: Sequence[anomaly_mod.Anomaly]) -> None:
        """A detector's time-driven anomalies to the decision; the silence or slowness of a run that is
        not running is no hang."""
        if not found or rt.detector is None:
            return
        running = rt.job.state == workloads.JobState.RUNNING and rt.detector.attempt == rt.job.attempt
        for anomaly in found:
            if not running and anomaly.symptom in (vocab.Symptom.HANG, vocab.Symptom.STRAGGLER):
                continue
            await self.decision.handle(rt, anomaly)

    def new_detector(self, rt: runtime.WorkloadRuntime, job: workloads.JobSnapshot) -> None:
        """A detector for ``job``'s current attempt, with the effective policy's detection settings."""
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
        rank_map = hosts.RankMap(job.nodes, runtime.tasks_per_node(job))
        rt.detector = stream.WorkloadDetector(
            rt.matcher, settings, self.clock, workload=rt.workload, attempt=job.attempt, rank_map=rank_map
        )
        rt.detector_attempt = job.attempt
        rt.history = ledger.record_attempt_start(rt.history, job.attempt, self.clock.now())

    def note_unreadable(self, runtimes: Sequence[runtime.WorkloadRuntime]) -> None:
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

    async def conclude_replaced(self, rt: runtime.WorkloadRuntime, job: workloads.JobSnapshot) -> None:
        """The attempt was replaced while its crash window was still settling: judge that evidence now,
        on the old attempt. A workload's own restart policy can start the next attempt within a
        second of the failure (a PyTorchJob's re-created pod), before the window settles; dropping
        the old detector then would lose the anomaly and leave the failed node in place."""
        assert rt.detector is not None
        if not rt.detector.settling:
            return
        for anomaly in rt.detector.on_exit(job.model_copy(update={"attempt": rt.detector_attempt})):
            await self.decision.handle(rt, anomaly)

    async def drain(self, rt: runtime.WorkloadRuntime) -> None:
        """Read and judge what is left of the attempt's output (it ended or is being replaced): the
        lines still waiting in the backlog first."""
        if pending := self.backlog.pop(rt.workload, None):
            await self.feed_batch(rt, pending, tick=False)
        await self.feed_batch(rt, await self.read(rt))

    @staticmethod
    def reads_a_store(rt: runtime.WorkloadRuntime) -> bool:
        """Whether ``rt``'s output comes from a log store a shipper fills (``await_store_lines`` may wait)."""
        return rt.book.kind in SHIPPED

    async def await_store_lines(self, rt: runtime.WorkloadRuntime) -> None:
        """A failed attempt whose output comes from a log store (not files) and shows no error yet:
        keep reading for up to ``log_store_lag_s`` before it is judged on its exit state alone. A
        store delivers a row a moment after it was written (the shipper's poll, the server's
        ingestion), and a job often ends within a second or two of its first cause (a rank's Xid,
        then srun kills the step): judged at once, the crash is "killed, cause unknown" and the
        requeue keeps the bad node. Files and pod logs need no wait: what was written before the end
        can be read at once."""
        if not self.reads_a_store(rt):
            return
        deadline = time.monotonic() + self.settings.log_store_lag_s
        while rt.detector is not None and not rt.detector.has_serious and time.monotonic() < deadline:
            await asyncio.sleep(STORE_POLL_S)
            await self.drain(rt)

    async def read_round(self, runtimes: Sequence[runtime.WorkloadRuntime]) -> list[Batch]:
        """``read`` of every workload; the output files of all of them in one batch of reads
        (``tailbook.read_books``: a few thread hand-offs per round, not one per file)."""
        files: list[int] = []
        books: list[tailbook.TailBook] = []
        others: list[int] = []
        for i, rt in enumerate(runtimes):
            if rt.workload in self.backlog:
                continue  # its waiting lines are fed first; reading on would only queue more
            if rt.detector is not None and isinstance(rt.book, tailbook.TailBook):
                files.append(i)
                books.append(rt.book)
            else:
                others.append(i)
        got, rest = await asyncio.gather(tailbook.read_books(books),
                                         asyncio.gather(*(self.read(runtimes[i]) for i in others)))
        out: list[Batch] = [[] for _ in runtimes]
        for i, batch in zip(files, got, strict=True):
            out[i] = [(f, lines) for f, lines in batch]
        for i, theirs in zip(others, rest, strict=True):
            out[i] = theirs
        return out

    async def read(self, rt: runtime.WorkloadRuntime) -> Batch:
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

    async def feed_batch(
        self, rt: runtime.WorkloadRuntime, batch: Batch, *, tick: bool = True, budget_s: float | None = None
    ) -> Batch:
        """Feed the lines, then one detector tick (``tick=False``: the caller ticks, as the tailing
        round does); the time-driven checks run once per batch, not after every line. With
        ``budget_s``, feeding stops once that much time went by; the lines not fed are returned."""
        fed = False
        start = time.monotonic()
        for k, (f, lines) in enumerate(batch):
            for i, line in enumerate(lines):
                if budget_s is not None and i % 64 == 63 and time.monotonic() - start >= budget_s:
                    return [(f, lines[i:]), *batch[k + 1 :]]
                rt.book.consume(f, line)  # first: a decision this line brings about stores it as read
                await self.feed(rt, line)
                fed = True
        if tick and fed and rt.detector is not None:
            await self._handle(rt, rt.detector.tick())  # the same filter as the round's ticks
        return []

    async def feed(self, rt: runtime.WorkloadRuntime, line: signals.LogLine) -> None:
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
                await self.decision.handle(rt, anomaly)
            sample = rt.detector.last_progress if rt.detector is not None else None
            if sample is not None and self.journal.progress_due(rt.workload, rt.detector_attempt, sample):
                await self.journal.progress(rt.workload, rt.detector_attempt, sample)

    async def watch_metrics(self) -> None:
        """One round of metric-based detection: a hardware fault in the GPU metrics of a node of a
        running opted-in job is an anomaly even when the job's log says nothing. Each fault is raised
        once per attempt; the policy's ``detection.gpuMetricAction`` decides whether it is acted on."""
        metrics = self.evidence.gpu_metrics
        if metrics is None:
            return
        now = self.clock.now()
        for rt in list(self.runtimes.values()):
            job = rt.job
            if (rt.spec is None or rt.detector is None or job.state != workloads.JobState.RUNNING
                    or rt.detector.attempt != job.attempt or not job.nodes or job.started_at is None):
                continue
            found = await metrics.window(job.nodes, job.started_at, now)
            seen = rt.memory.metric_faults.setdefault(job.attempt, set())
            fresh = [f for f in found.faults() if f.key not in seen]
            if not fresh:
                continue
            seen.update(f.key for f in fresh)
            await self.decision.handle(rt, evidence_mod.metric_anomaly(fresh, now))
