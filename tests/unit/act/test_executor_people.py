"""The executor and the people around it: both run-time keys before every step (the cluster switch,
the runtime pause), a person's change in the middle of a recovery, a node a person manages, and an
outage that must leave the generation pending, never abandoned."""

from __future__ import annotations

import sqlalchemy.exc

from tests.support import fake_scheduler
from trainguard.act import executor, switch
from trainguard.model import actions, clock, vocab, workloads
from trainguard.schedulers import base
from trainguard.store import audit

JOB_ID = "42"
WORKLOAD = "slurm/test/42"
REQUEUE = vocab.AdviceAction.REQUEUE


def ops(scheduler: fake_scheduler.FakeScheduler) -> list[str]:
    return [m["operation"] for m in scheduler.mutations]


async def watchdog_reasons(store: audit.AuditStore) -> list[str]:
    return [str(r.payload.get("reason")) for r in await store.audit_records(workload=WORKLOAD)
            if r.kind is vocab.AuditKind.WATCHDOG]


async def test_with_the_cluster_switch_off_an_action_advice_changes_nothing(scheduler, store, manual_clock, advise):
    off = executor.Executor(scheduler, store, manual_clock, switch=switch.ActionSwitch(False, store))

    assert await off.reconcile(advise(REQUEUE, exclude_nodes=["node2"])) is vocab.Disposition.ABANDONED
    assert ops(scheduler) == []
    [reason] = await watchdog_reasons(store)
    assert reason.startswith(executor.SWITCHED_OFF) and "cluster switch is off" in reason


async def test_a_pause_stops_the_next_step_and_releases_only_our_hold(scheduler, store, manual_clock, advise):
    keys = switch.ActionSwitch(True, store)
    ex = executor.Executor(scheduler, store, manual_clock, switch=keys)

    async def pause_after_requeue_hold() -> None:
        await store.set_control(switch.PAUSE, {"paused": True, "reason": "rack 12"}, by="ops", channel="cli",
                                at=manual_clock.now(), payload={"operation": "pause"})

    # the pause arrives right after our first step (requeue_hold), before the exclusion
    item = advise(REQUEUE, exclude_nodes=["node2"])
    original = scheduler.requeue_hold

    async def requeue_hold_then_pause(job_id: str, *, attempt: int | None = None) -> None:
        await original(job_id, attempt=attempt)
        await pause_after_requeue_hold()

    scheduler.requeue_hold = requeue_hold_then_pause  # type: ignore[method-assign]
    assert await ex.reconcile(item) is vocab.Disposition.ABANDONED
    assert ops(scheduler) == ["requeue_hold", "release"]  # no exclusion: the watchdog released our hold
    assert not scheduler.jobs[JOB_ID].held
    [reason] = await watchdog_reasons(store)
    assert "actions are paused by ops: rack 12" in reason and "before step exclude_nodes" in reason


async def test_a_persons_cancel_before_our_first_step_is_left_alone(scheduler, store, manual_clock, advise):
    scheduler.jobs[JOB_ID] = scheduler.jobs[JOB_ID].model_copy(update={"state": workloads.JobState.CANCELLED})
    ex = executor.Executor(scheduler, store, manual_clock)

    assert await ex.reconcile(advise(REQUEUE)) is vocab.Disposition.ABANDONED
    assert ops(scheduler) == []
    [reason] = await watchdog_reasons(store)
    assert reason.startswith(executor.PERSONS_CHANGE) and "cancelled, not by Trainguard" in reason


async def test_a_persons_removal_of_our_exclusion_stops_the_recovery(scheduler, store, manual_clock, advise):
    ex = executor.Executor(scheduler, store, manual_clock)
    original = scheduler.exclude_nodes

    async def exclude_then_person_clears(job_id: str, nodes: list[str]) -> None:
        await original(job_id, nodes)
        scheduler.jobs[job_id] = scheduler.jobs[job_id].model_copy(update={"excluded_nodes": []})  # scontrol update

    scheduler.exclude_nodes = exclude_then_person_clears  # type: ignore[method-assign]
    assert await ex.reconcile(advise(REQUEUE, exclude_nodes=["node2"])) is vocab.Disposition.ABANDONED
    assert ops(scheduler) == ["requeue_hold", "exclude_nodes", "release"]  # the release is the watchdog's
    [reason] = await watchdog_reasons(store)
    assert "removed our exclusion of node2" in reason


async def test_a_node_a_person_set_down_is_never_drained_over_their_reason(scheduler, store, manual_clock, advise):
    scheduler.nodes["node2"] = workloads.NodeSnapshot(name="node2", state="DOWN", reason="admin: PSU swap",
                                                      partitions=["debug"])
    ex = executor.Executor(scheduler, store, manual_clock)

    disposition = await ex.reconcile(advise(REQUEUE, exclude_nodes=["node2"], drain_nodes=["node2"]))
    assert disposition is vocab.Disposition.CONVERGED
    assert "drain_node" not in ops(scheduler)
    assert scheduler.nodes["node2"].reason == "admin: PSU swap"
    drain = {r.step: r for r in await store.actions_for(WORKLOAD, 0, 1)}["drain_node:node2"]
    assert drain.status is actions.ActionStatus.SKIPPED and drain.error.startswith(executor.LEFT_NODE_ALONE)


async def test_a_scheduler_outage_leaves_the_generation_pending_and_it_resumes_once(
        scheduler, store, manual_clock: clock.ManualClock, advise):
    down = base.SchedulerError("Unable to contact slurm controller (connect failure)")
    ex = executor.Executor(scheduler, store, manual_clock,
                           scheduler_outage=lambda exc: isinstance(exc, base.SchedulerError))
    scheduler.fail["get_job"] = down
    item = advise(REQUEUE, exclude_nodes=["node2"])

    assert await ex.reconcile(item) is vocab.Disposition.PENDING
    assert (WORKLOAD, 0, 1) in ex.stalled and ops(scheduler) == []
    assert await store.get_outcome(WORKLOAD, 0, 1) is None
    del scheduler.fail["get_job"]
    assert await ex.reconcile(item) is vocab.Disposition.CONVERGED and ex.stalled == set()
    assert ops(scheduler) == ["requeue_hold", "exclude_nodes", "release"]
    assert scheduler.jobs[JOB_ID].excluded_nodes == ["node2"]


async def test_a_store_outage_mid_recovery_leaves_it_pending_with_each_step_done_once(
        scheduler, store, manual_clock, advise):
    ex = executor.Executor(scheduler, store, manual_clock,
                           store_outage=lambda exc: isinstance(exc, sqlalchemy.exc.OperationalError))
    item = advise(REQUEUE, exclude_nodes=["node2"])
    original = store.begin_action
    calls = {"n": 0}

    async def flaky_begin(record: actions.ActionRecord, **kwargs: object) -> actions.ActionRecord:
        calls["n"] += 1
        if record.step == "exclude_nodes" and calls.get("down", 1):
            calls["down"] = 0
            raise sqlalchemy.exc.OperationalError("INSERT", {}, Exception("database is locked"))
        return await original(record, **kwargs)  # type: ignore[arg-type]

    store.begin_action = flaky_begin  # type: ignore[method-assign]
    assert await ex.reconcile(item) is vocab.Disposition.PENDING
    assert ops(scheduler) == ["requeue_hold"] and scheduler.jobs[JOB_ID].held  # our hold stands meanwhile
    assert await ex.reconcile(item) is vocab.Disposition.CONVERGED
    assert ops(scheduler) == ["requeue_hold", "exclude_nodes", "release"]  # nothing done twice


async def test_a_step_cut_off_by_an_outage_stays_pending_and_runs_once_when_it_ends(
        scheduler, store, manual_clock, advise):
    down = base.SchedulerError("Unable to contact slurm controller (connect failure)")
    ex = executor.Executor(scheduler, store, manual_clock,
                           scheduler_outage=lambda exc: isinstance(exc, base.SchedulerError))
    item = advise(REQUEUE, exclude_nodes=["node2"])
    original = scheduler.exclude_nodes

    async def exclude_while_down(job_id: str, nodes: list[str]) -> None:
        scheduler.fail["get_job"] = down  # the controller goes away as we call it
        raise down

    scheduler.exclude_nodes = exclude_while_down  # type: ignore[method-assign]
    assert await ex.reconcile(item) is vocab.Disposition.PENDING
    rows = {r.step: r for r in await store.actions_for(WORKLOAD, 0, 1)}
    assert rows["exclude_nodes"].status is actions.ActionStatus.INTENT and scheduler.jobs[JOB_ID].held
    scheduler.exclude_nodes = original  # type: ignore[method-assign]
    del scheduler.fail["get_job"]
    assert await ex.reconcile(item) is vocab.Disposition.CONVERGED
    assert ops(scheduler) == ["requeue_hold", "exclude_nodes", "release"]


async def test_a_read_that_fails_once_as_the_scheduler_comes_back_is_waited_out_not_abandoned(
        scheduler, store, manual_clock, advise):
    """Seen on real Slurm: the first read after an outage fails, the next one (the probe) answers. A read
    is never a refusal: the generation waits instead of being abandoned."""
    ex = executor.Executor(scheduler, store, manual_clock,
                           scheduler_outage=lambda exc: isinstance(exc, base.SchedulerError))
    original = scheduler.get_job
    calls = {"n": 0}

    async def flapping(job_id: str) -> workloads.JobSnapshot:
        calls["n"] += 1
        if calls["n"] == 1:
            raise base.SchedulerError("slurm_load_jobs error: Unable to contact slurm controller (connect failure)")
        return await original(job_id)

    scheduler.get_job = flapping  # type: ignore[method-assign]
    item = advise(REQUEUE, exclude_nodes=["node2"])
    assert await ex.reconcile(item) is vocab.Disposition.PENDING
    assert await store.get_outcome(WORKLOAD, 0, 1) is None
    assert await ex.reconcile(item) is vocab.Disposition.CONVERGED
    assert ops(scheduler) == ["requeue_hold", "exclude_nodes", "release"]
