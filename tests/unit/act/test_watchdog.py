"""Watchdog paths: deadline sweep, hold release on failure and on start, the converged-hold exception."""

from __future__ import annotations

from tests.support import fake_scheduler
from trainguard.act import executor, watchdog
from trainguard.model import actions, vocab, workloads
from trainguard.schedulers import base
from trainguard.store import audit

JOB_ID = "42"
WORKLOAD = "slurm/test/42"
REQUEUE, HOLD = vocab.AdviceAction.REQUEUE, vocab.AdviceAction.HOLD


def row(step: str, operation: actions.Operation, status: actions.ActionStatus) -> actions.ActionRecord:
    return actions.ActionRecord(workload=WORKLOAD, attempt=0, generation=1, step=step, operation=operation,
                                status=status)


def test_holds_unreleased_reads_our_own_rows():
    hold_done = row("requeue_hold", actions.Operation.REQUEUE_HOLD, actions.ActionStatus.DONE)
    hold_intent = row("hold", actions.Operation.HOLD, actions.ActionStatus.INTENT)
    hold_failed = row("hold", actions.Operation.HOLD, actions.ActionStatus.FAILED)
    release_done = row("release", actions.Operation.RELEASE, actions.ActionStatus.DONE)
    release_intent = row("release", actions.Operation.RELEASE, actions.ActionStatus.INTENT)

    assert watchdog.holds_unreleased([hold_done])
    assert watchdog.holds_unreleased([hold_intent])
    assert watchdog.holds_unreleased([hold_done, release_intent])
    assert not watchdog.holds_unreleased([hold_done, release_done])
    assert not watchdog.holds_unreleased([hold_failed])
    assert not watchdog.holds_unreleased([])


async def test_sweep_abandons_expired_pending_advice_and_releases(
    scheduler: fake_scheduler.FakeScheduler, store: audit.AuditStore, manual_clock, advise,
):
    item = advise(REQUEUE, exclude_nodes=["node2"])
    await store.record_advice(item, at=manual_clock.now())
    await store.begin_action(row("requeue_hold", actions.Operation.REQUEUE_HOLD, actions.ActionStatus.INTENT),
                             at=manual_clock.now())
    await scheduler.requeue_hold(JOB_ID)  # then the executor died
    guard = watchdog.Watchdog(scheduler, store, manual_clock)

    assert await guard.sweep() == []  # not expired yet: left to the executor
    manual_clock.advance(301)
    assert await guard.sweep() == [item]

    assert not scheduler.jobs[JOB_ID].held
    outcome = await store.get_outcome(WORKLOAD, 0, 1)
    assert outcome is not None and outcome.disposition is vocab.Disposition.ABANDONED
    records = await store.audit_records(workload=WORKLOAD, kind=vocab.AuditKind.WATCHDOG)
    assert records[-1].payload["released_hold"] is True
    assert records[-1].decided_by == "watchdog"
    assert await store.pending_advice() == []


async def test_recover_retries_a_release_that_failed(scheduler, store, manual_clock, advise):
    scheduler.fail["exclude_nodes"] = base.SchedulerError("slurmctld not responding")
    scheduler.fail["release"] = base.SchedulerError("slurmctld not responding")
    item = advise(REQUEUE, exclude_nodes=["node2"])
    assert await executor.Executor(scheduler, store, manual_clock).reconcile(item) is vocab.Disposition.ABANDONED
    assert scheduler.jobs[JOB_ID].held  # the release failed: still held, and recorded so
    failed = {r.step: r for r in await store.actions_for(WORKLOAD, 0, 1)}[watchdog.RELEASE_STEP]
    assert failed.status is actions.ActionStatus.FAILED

    scheduler.fail.clear()  # the controller is back; the operator restarts
    released = await watchdog.Watchdog(scheduler, store, manual_clock).recover()

    assert released == [item]
    assert not scheduler.jobs[JOB_ID].held
    assert [m["operation"] for m in scheduler.mutations] == ["requeue_hold", "release"]


async def test_recover_keeps_a_converged_hold(scheduler, store, manual_clock, advise):
    scheduler.jobs[JOB_ID] = scheduler.jobs[JOB_ID].model_copy(update={"state": workloads.JobState.PENDING})
    assert await executor.Executor(scheduler, store, manual_clock).reconcile(advise(HOLD)) is \
        vocab.Disposition.CONVERGED

    assert await watchdog.Watchdog(scheduler, store, manual_clock).recover() == []
    assert scheduler.jobs[JOB_ID].held


async def test_recover_leaves_pending_generations_to_the_executor(scheduler, store, manual_clock, advise):
    item = advise(REQUEUE, exclude_nodes=["node2"])
    await store.record_advice(item, at=manual_clock.now())
    await store.begin_action(row("requeue_hold", actions.Operation.REQUEUE_HOLD, actions.ActionStatus.INTENT),
                             at=manual_clock.now())
    await scheduler.requeue_hold(JOB_ID)

    assert await watchdog.Watchdog(scheduler, store, manual_clock).recover() == []
    assert scheduler.jobs[JOB_ID].held  # the executor will exclude first, then release
    assert await store.pending_advice() == [item]
    assert await executor.Executor(scheduler, store, manual_clock).reconcile(item) is vocab.Disposition.CONVERGED
    assert scheduler.jobs[JOB_ID].excluded_nodes == ["node2"] and not scheduler.jobs[JOB_ID].held


async def test_abandon_without_a_hold_calls_nothing(scheduler, store, manual_clock, advise):
    item = advise(REQUEUE)
    await store.record_advice(item, at=manual_clock.now())

    disposition = await watchdog.Watchdog(scheduler, store, manual_clock).abandon(item, "operator asked")

    assert disposition is vocab.Disposition.ABANDONED
    assert scheduler.calls == []
