"""The recovery runner: carries out each recorded advice, one recovery per workload at a time.

Place: a step module of the engine, below the decision (which hands it each new advice) and above
the executor (``act.executor``: every scheduler step, fenced, intent first). It owns what happens
to an advice once recorded:

- carry it out as the workload's task, then the decisions that waited for it (``carry_out``);
- resume pending advice: at start-up, when shards are taken over, and when the sweep finds a
  retry backoff passed or a stalled step (``resume_pending``, the one path for all three);
- the watchdog sweep and the undrain of our drained nodes (``sweep``);
- the blast-radius limits and administrator's caps each advice is held to (``blast_limit``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from trainguard import health as health_mod
from trainguard import settings as settings_mod
from trainguard import shards as shards_mod
from trainguard.act import executor as executor_mod
from trainguard.act import ports as act_ports
from trainguard.act import switch as switch_mod
from trainguard.act import undrain
from trainguard.engine import policies as policies_mod
from trainguard.engine import runtime
from trainguard.model import actions, advice, clock, limits, tasks, vocab
from trainguard.observe import metrics as metrics_mod
from trainguard.policy import blast_radius, loader
from trainguard.schedulers import base
from trainguard.store import audit
from trainguard.store import ledger as limits_ledger

logger = runtime.logger

NextDeferred = Callable[[runtime.WorkloadRuntime], Awaitable[advice.Advice | None]]
"""Takes the oldest deferred decision of a workload and decides it (``decision.Decision.next_deferred``):
its advice, or None when it asks for nothing (evidence only)."""


class RecoveryRunner:
    """Carries out the advice of every workload, each in its own named task."""

    def __init__(
        self, scheduler: base.Scheduler, store: audit.AuditStore, clock_: clock.Clock, *,
        settings: settings_mod.EngineSettings, runtimes: runtime.Runtimes, policies: policies_mod.PolicyResolver,
        reporter: runtime.Reporter, metrics: metrics_mod.EngineMetrics, next_deferred: NextDeferred,
        fence: act_ports.Fence, shards: shards_mod.Ownership | None, keep: set[asyncio.Task[None]],
    ) -> None:
        self.scheduler = scheduler
        self.store = store
        self.clock = clock_
        self.settings = settings
        self.runtimes = runtimes
        self.policies = policies
        self.reporter = reporter
        self.metrics = metrics
        self.next_deferred = next_deferred
        self.shards = shards
        self.keep = keep
        """Every task this runner starts, held until it ends (``model.tasks.spawn``)."""
        self.switch = switch_mod.ActionSwitch(settings.allow_action, store)
        """Both run-time keys (the cluster switch, the runtime pause), read before every Action step."""
        self.executor = executor_mod.Executor(
            scheduler, store, clock_, blast_limit=self.blast_limit, fence=fence, switch=self.switch,
            store_outage=lambda exc: health_mod.classify(exc) == health_mod.STORE,
            scheduler_outage=lambda exc: (health_mod.classify(exc) == health_mod.SCHEDULER
                                          and not isinstance(exc, base.JobGone | base.Unsupported)),
            on_node_change=self.node_changed)
        self.undrainer = undrain.Undrainer(
            scheduler, store, clock_, lambda name: policies.undrain_rule(name, self.paused),
            validator=scheduler if isinstance(scheduler, act_ports.NodeValidator) else None,
            on_node_change=self.node_changed)
        self.paused: str | None = None
        """Why actions are off now, as the last sweep read it (node housekeeping, the gauge)."""

    async def node_changed(self, row: actions.ActionRecord) -> None:
        """A node we took out of service or put back: handed to the listeners as the action record it
        is (the operator's ``NodeOutOfService`` / ``NodeReturned`` Events), for a workload still tracked."""
        rt = self.runtimes.get(row.workload)
        if rt is not None:
            await self.reporter.notify(rt, vocab.AuditKind.ACTION, {
                "operation": row.operation.value, "step": row.step, "status": row.status.value,
                "arguments": dict(row.args), "generation": row.generation, "error": row.error})

    # ------------------------------------------------------------------ one workload's recovery

    def busy(self, rt: runtime.WorkloadRuntime) -> bool:
        """Whether the workload's recovery (or its wait for GPU metrics) is still in flight."""
        return tasks.busy(rt.task)

    def start(self, rt: runtime.WorkloadRuntime, work: Coroutine[Any, Any, None], name: str) -> None:
        """Run ``work`` as the workload's task (named for the logs: ``cli.logsetup`` reads the name)."""
        rt.task = tasks.spawn(work, name, self.keep)

    def defer(self, rt: runtime.WorkloadRuntime, decision: runtime.Deferred) -> None:
        """A decision that came while the previous generation is still being carried out: a new one would
        race it, so it is decided after it, in its task (``carry_out``), while detection of every other
        workload goes on."""
        rt.memory.deferred.append(decision)

    async def carry_out(self, rt: runtime.WorkloadRuntime, item: advice.Advice | None) -> None:
        """Carry out ``item``, then any decision that waited for it (stronger evidence meanwhile)."""
        while True:
            if item is not None:
                disposition = await self.executor.reconcile(item)
                rt.disposition = disposition
                outcome: dict[str, object] = {"generation": item.generation, "disposition": disposition.value}
                await self.reporter.notify(rt, vocab.AuditKind.OUTCOME, outcome)
                logger.info("%s attempt %d generation %d: %s -> %s", item.workload, item.attempt, item.generation,
                            item.action.value, disposition.value)
            if not rt.memory.deferred or rt.spec is None:
                return
            item = await self.next_deferred(rt)

    def abort(self) -> None:
        """Cancel every recovery in flight (``core.Engine.abort``)."""
        for rt in self.runtimes.values():
            if tasks.busy(rt.task):
                assert rt.task is not None
                logger.warning("%s: recovery %s stopped (not the leader any more)", rt.workload, rt.task.get_name())
                rt.task.cancel()

    # ------------------------------------------------------------------ pending advice

    def mine(self, workload: str) -> bool:
        """Whether this engine acts on ``workload``: always, unless sharded and its shard is another's."""
        return self.shards is None or self.shards.owns(workload)

    async def resume_pending(self, wanted: Callable[[advice.Advice], bool], prefix: str, *,
                             announce: bool = False) -> None:
        """Carry on the pending advice generations ``wanted`` picks: a tracked workload's in its task
        (``prefix:WORKLOAD:GENERATION``, unless a recovery of it is in flight: that one goes on), an
        untracked one's at once (the executor re-reads the scheduler before each step). ``announce``:
        one line per generation (at start-up; the sweep's releases are routine)."""
        for item in await self.store.pending_advice():
            if not wanted(item):
                continue
            if announce:
                logger.info("resuming advice %s attempt %d generation %d", item.workload, item.attempt,
                            item.generation)
            rt = self.runtimes.get(item.workload)
            if rt is None:
                await self.executor.reconcile(item)
            elif not self.busy(rt):
                self.start(rt, self.carry_out(rt, item), f"{prefix}:{item.workload}:{item.generation}")

    async def recover(self) -> None:
        """On start: the watchdog releases leftover holds of ours; pending advice is resumed. Sharded:
        only in the shards held (the watchdog asks the fence), the others' holders do theirs."""
        if self.shards is not None:
            self.shards.note(await self.scheduler.list_jobs())
            self.shards.gained()  # what is held now is recovered here, not again by discovery
        released = await self.executor.watchdog.recover()
        for item in released:
            logger.warning("released a hold left by a previous run on %s (generation %d)", item.workload,
                           item.generation)
        await self.resume_pending(lambda item: self.mine(item.workload), "resume", announce=True)

    async def take_over(self) -> None:
        """Shards gained since the last round (another replica died or released them): resume their
        pending generations and release holds of ours left in them, as ``recover`` does at start."""
        if self.shards is None or not (gained := self.shards.gained()):
            return
        logger.info("shards %s now held: resuming their pending recoveries", sorted(gained))
        await self.executor.watchdog.recover()
        shards = self.shards
        await self.resume_pending(lambda item: shards.index_of(item.workload) in gained, "takeover")

    async def sweep(self) -> None:
        """Watchdog: give up on advice past its deadline, releasing any hold of ours; then release
        requeued jobs whose retry backoff (``Advice.release_at``) has passed; then resume the nodes
        we drained whose policy's ``exclusion.undrainAfter`` has passed (``act.undrain``)."""
        paused = await self.switch.blocked()
        if paused != self.paused:
            if paused and self.settings.allow_action:
                logger.warning("actions are off: %s", paused)
            elif self.paused and self.settings.allow_action:
                logger.warning("actions are allowed again (policies in Action mode act)")
            self.paused = paused
        self.metrics.actions_paused.set(1 if paused else 0)
        await self.executor.watchdog.sweep()
        now = self.clock.now()

        def due(item: advice.Advice) -> bool:
            stalled = (item.workload, item.attempt, item.generation) in self.executor.stalled
            return self.mine(item.workload) and (stalled or (item.release_at is not None and now >= item.release_at))

        await self.resume_pending(due, "release")
        if self.shards is None or 0 in self.shards.leases.held():  # node housekeeping: shard 0's holder
            await self.undrainer.sweep()

    # ------------------------------------------------------------------ limits

    async def blast_limit(self, item: advice.Advice) -> limits.LimitReport:
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
            policy = self.policies.policies.get(item.policy or None)
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
