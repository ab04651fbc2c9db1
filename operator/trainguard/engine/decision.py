"""The decision: anomaly -> audit -> verdict -> audit -> advice, recorded before anything is done.

Place: a step module of the engine, called by tailing and tracking with each anomaly a detector
raises (``handle``); above the node evidence (weighed in every verdict), the record of somebody
else's decisions and the recovery runner, to which it hands each advice that asks for something.
One advice per attempt, unless stronger evidence changes the first cause (``stronger``); a crash
the log cannot attribute may wait for the GPU metrics in the workload's task (``awaits_metrics``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from trainguard.attribute import allocation as alloc
from trainguard.attribute import evidence as node_evidence
from trainguard.attribute import external, lemon, rules
from trainguard.detect import own_actions
from trainguard.engine import evidence as evidence_mod
from trainguard.engine import placement, recovery, runtime, theirs
from trainguard.journal import recorder as journal_mod
from trainguard.model import advice, anomalies, clock, verdicts, vocab, workloads
from trainguard.model import evidence as evidence_model
from trainguard.policy import decide, ledger
from trainguard.schedulers import base
from trainguard.signals import gpu_metrics
from trainguard.store import audit

logger = runtime.logger

_STRENGTH = {
    vocab.Attribution.HARDWARE.value: 3,
    vocab.Attribution.SYSTEM.value: 2,
    vocab.Attribution.APPLICATION.value: 1,
    vocab.Attribution.UNKNOWN.value: 0,
    vocab.Attribution.NONE.value: -1,
}


class Decision:
    """Turns each anomaly of a workload into a verdict and, at most once per attempt, an advice."""

    def __init__(
        self, scheduler: base.Scheduler, store: audit.AuditStore, clock_: clock.Clock, *,
        journal: journal_mod.Recorder, reporter: runtime.Reporter, evidence: evidence_mod.NodeEvidence,
        theirs_: theirs.Theirs, runner: recovery.RecoveryRunner, node_actions: Sequence[str],
    ) -> None:
        self.scheduler = scheduler
        self.store = store
        self.clock = clock_
        self.journal = journal
        self.reporter = reporter
        self.evidence = evidence
        self.theirs = theirs_
        self.runner = runner
        self.node_actions = list(node_actions)
        """The policy actions that let the scheduler take a node out of service (``base.node_actions``)."""

    async def handle(self, rt: runtime.WorkloadRuntime, anomaly: anomalies.Anomaly) -> None:
        """Anomaly -> audit -> verdict -> audit -> advice; the recovery runs as the workload's task."""
        if rt.spec is None or rt.detector is None:
            return
        attempt = rt.detector.attempt
        if await self.own_effect(rt, anomaly, attempt):
            return
        change, _ = await self.theirs.check(rt, attempt)
        if change is not None and own_actions.is_teardown(anomaly):
            return  # the teardown of somebody else's cancel, requeue or time limit: their decision, recorded
        now = self.clock.now()
        anomaly = alloc.confine_anomaly(anomaly, await self.allocation(rt))
        await self.store.record_anomaly(workload=rt.workload, attempt=attempt, anomaly=anomaly, at=now)
        rt.memory.last_anomaly = anomaly
        await self.reporter.notify(rt, vocab.AuditKind.ANOMALY, anomaly.model_dump(mode="json"))
        verdict = await self.attribute(rt, anomaly, attempt, now)
        if self.awaits_metrics(rt, anomaly, verdict, attempt):
            rt.memory.awaiting_metrics = True
            self.runner.start(rt, self.after_metrics(rt, anomaly, attempt), f"await-metrics:{rt.workload}:{attempt}")
            return
        await self.record_verdict(rt, verdict, attempt)

        if change is not None:
            return  # evidence only: somebody else's decision ended the attempt (recorded by theirs.check)
        earlier = rt.memory.advised.get(attempt)
        if earlier is not None and not stronger(verdict, earlier):
            logger.info("%s attempt %d: already advised (%s); %s recorded as evidence only", rt.workload, attempt,
                        earlier, anomaly.category.value)
            return
        if self.runner.busy(rt):
            self.runner.defer(rt, (anomaly, verdict, attempt))
            return
        item = await self.decide(rt, anomaly, verdict, attempt, save_tail=True)
        if item is not None:
            self.runner.start(rt, self.runner.carry_out(rt, item), f"recover:{rt.workload}:{attempt}:{item.generation}")

    async def record_verdict(self, rt: runtime.WorkloadRuntime, verdict: verdicts.Verdict, attempt: int) -> None:
        await self.store.record_verdict(workload=rt.workload, attempt=attempt, verdict=verdict, at=self.clock.now())
        rt.memory.last_verdict = verdict
        await self.reporter.notify(rt, vocab.AuditKind.VERDICT, verdict.model_dump(mode="json"))
        rt.history = ledger.record_anomaly(rt.history, attempt, verdict.category, verdict.attribution)

    def awaits_metrics(self, rt: runtime.WorkloadRuntime, anomaly: anomalies.Anomaly, verdict: verdicts.Verdict,
                       attempt: int) -> bool:
        """Whether to give the GPU metrics time before deciding on this crash: the job's log could not
        say (unknown or system), the metrics answered without a fault, and the fault, if there was one,
        may still be on its way (DCGM samples and Prometheus scrapes every 15-30 s, a crash is read
        within a second). Only the first decision of an attempt waits, and only one at a time."""
        metrics = self.evidence.gpu_metrics
        if metrics is None or metrics.config.wait_s <= 0 or attempt in rt.memory.advised:
            return False
        if self.runner.busy(rt):
            return False
        answered = any(s.name == gpu_metrics.SOURCE and s.state == evidence_model.SourceState.USED
                       for s in verdict.sources)
        return (answered and anomaly.symptom == vocab.Symptom.CRASH and not any(f.fault for f in verdict.node_evidence)
                and verdict.attribution in (vocab.Attribution.UNKNOWN, vocab.Attribution.SYSTEM))

    async def after_metrics(self, rt: runtime.WorkloadRuntime, anomaly: anomalies.Anomaly, attempt: int) -> None:
        """The wait of ``awaits_metrics``, in the workload's recovery task (detection of every other
        workload goes on; this workload's later anomalies wait for it); then the verdict and the
        decision as ``handle`` makes them, and the recovery."""
        assert self.evidence.gpu_metrics is not None
        try:
            await asyncio.sleep(self.evidence.gpu_metrics.config.wait_s)
            if rt.spec is None:
                return
            verdict = await self.attribute(rt, anomaly, attempt, self.clock.now())
            await self.record_verdict(rt, verdict, attempt)
            item = await self.decide(rt, anomaly, verdict, attempt)
        finally:
            rt.memory.awaiting_metrics = False
        await self.runner.carry_out(rt, item)

    async def next_deferred(self, rt: runtime.WorkloadRuntime) -> advice.Advice | None:
        """Decide the oldest decision that waited for the recovery in flight (``RecoveryRunner.defer``).
        Queued while a decision of the attempt was pending (e.g. waiting for GPU metrics) and that one
        came out at least as strong: evidence only (None)."""
        anomaly, verdict, attempt = rt.memory.deferred.popleft()
        earlier = rt.memory.advised.get(attempt)
        if earlier is not None and not stronger(verdict, earlier):
            return None
        return await self.decide(rt, anomaly, verdict, attempt)

    async def own_effect(self, rt: runtime.WorkloadRuntime, anomaly: anomalies.Anomaly, attempt: int) -> bool:
        """True (and recorded as evidence of that action) when ``anomaly`` is only the teardown that our
        own requeue/cancel of this attempt caused: the effects of our actions are not failures."""
        now = self.clock.now()
        ours = await self.store.actions_by_operation(list(own_actions.CONSULTED), since=now - own_actions.WINDOW_S)
        row = own_actions.effect_of(anomaly, workload=rt.workload, attempt=attempt, ours=ours)
        if row is None:
            return False
        advised = rt.last_advice.action.value if rt.last_advice and rt.last_advice.generation == row.generation else ""
        payload = own_actions.effect_payload(anomaly, row, advised)
        await self.store.record_effect(workload=rt.workload, attempt=attempt, payload=payload, at=now)
        await self.reporter.notify(rt, vocab.AuditKind.ACTION, payload)
        logger.info("%s attempt %d: %s is the effect of our %s (generation %d), recorded as such, not as a failure",
                    rt.workload, attempt, anomaly.category.value, row.operation.value, row.generation)
        return True

    async def decide(
        self, rt: runtime.WorkloadRuntime, anomaly: anomalies.Anomaly, verdict: verdicts.Verdict, attempt: int,
        *, save_tail: bool = False,
    ) -> advice.Advice | None:
        """Policy -> the next advice generation, recorded before anything is done; None if it asks nothing.

        ``save_tail``: the read positions are stored with the advice, in its transaction, so a
        restart never reads the lines behind a recorded decision again (and, without the advice,
        reads them again). Deferred decisions do not: lines read since may wait on them.
        """
        assert rt.spec is not None
        change, job = await self.theirs.check(rt, attempt)
        if change is not None:
            return None  # somebody else's decision ended the attempt meanwhile: recorded, never answered
        generation = rt.history.advice_generation + 1
        now, history = self.clock.now(), rt.history
        partition_nodes = await self.partition_nodes(job.partition)
        own = await self.store.own_exclusions(rt.workload)
        placed = await self.allocation(rt)
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
        rt.memory.advised[attempt] = verdict.attribution.value if acted else vocab.Attribution.NONE.value
        files = rt.book.unsaved() if save_tail and rt.detector is not None else []
        # durable before anything is done
        await self.store.record_advice(item, at=self.clock.now(), tail=placement.tail_records(rt, files))
        rt.book.mark_saved(files)
        rt.last_advice = item
        rt.disposition = vocab.Disposition.PENDING
        await self.reporter.notify(rt, vocab.AuditKind.ADVICE, item.model_dump(mode="json"))
        if not acted:
            rt.disposition = vocab.Disposition.CONVERGED
            return None
        return item

    async def attribute(
        self, rt: runtime.WorkloadRuntime, anomaly: anomalies.Anomaly, attempt: int, now: float
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
        placed = await self.allocation(rt)
        job_nodes = list(rt.job.nodes)
        verdict = rules.attribute(
            anomaly, node_history=history, lemon_rule=rule, now=now, workload=rt.workload, attempt=attempt,
            job_nodes=job_nodes, allocation=placed,
        )
        found = await self.evidence.window(rt, attempt, now)
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

    async def allocation(self, rt: runtime.WorkloadRuntime) -> set[str]:
        """Every node an attempt of the workload was placed on (the store's record plus the current snapshot)."""
        return {*await self.store.allocation(rt.workload), *rt.job.nodes}

    async def partition_nodes(self, partition: str) -> int | None:
        """Usable nodes of the job's partition(s), for the "enough nodes left" check of exclusions."""
        try:
            nodes = await self.scheduler.list_nodes()
        except base.SchedulerError:
            return None
        return usable_partition_nodes(nodes, partition)


def stronger(verdict: verdicts.Verdict, earlier: str) -> bool:
    """A second advice for the same attempt only when the new verdict's attribution is stronger
    evidence than ``earlier`` (``DecisionMemory.advised``)."""
    return _STRENGTH.get(verdict.attribution.value, 0) > _STRENGTH.get(earlier, 0)


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


def _category(value: str) -> vocab.Category:
    try:
        return vocab.Category(value)
    except ValueError:
        return vocab.Category.NONE
