"""Watchdog paths: deadline sweep, hold release on failure and on start, the converged-hold exception."""

from __future__ import annotations

from tests.support import fake_scheduler
from tests.unit.act.conftest import START
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


# -- a person's hold is theirs ----------------------------------------------------------------------


def test_a_skipped_release_settles_our_hold():
    hold_done = row("requeue_hold", actions.Operation.REQUEUE_HOLD, actions.ActionStatus.DONE)
    left = row(watchdog.LEAVE_STEP, actions.Operation.RELEASE, actions.ActionStatus.SKIPPED)
    assert not watchdog.holds_unreleased([hold_done, left])


def test_hold_not_ours_compares_the_fresh_read_with_the_hold_we_saw():
    seen = {"reason": "JobHeldUser", "detail": "job requeued in held state"}
    ours = actions.ActionRecord(workload=WORKLOAD, attempt=0, generation=1, step="requeue_hold",
                                operation=actions.Operation.REQUEUE_HOLD, status=actions.ActionStatus.DONE,
                                args={"job_id": JOB_ID, watchdog.HOLD_SEEN: seen})
    job = workloads.JobSnapshot(workload=WORKLOAD, job_id=JOB_ID, state=workloads.JobState.PENDING, held=True,
                                hold_reason="JobHeldUser", hold_detail="job requeued in held state")
    assert watchdog.hold_not_ours([ours], job) == ""
    on_top = job.model_copy(update={"hold_reason": "JobHeldAdmin"})
    assert "JobHeldAdmin" in watchdog.hold_not_ours([ours], on_top)
    again = job.model_copy(update={"hold_reason": "JobHeldAdmin", "hold_detail": ""})
    assert watchdog.hold_not_ours([ours], again) != ""
    unrecorded = ours.model_copy(update={"args": {"job_id": JOB_ID}})
    assert watchdog.hold_not_ours([unrecorded], on_top) == ""  # cannot tell: never leave our hold behind


async def test_the_executor_records_how_our_hold_looks(scheduler, store, manual_clock, advise):
    item = advise(REQUEUE, exclude_nodes=["node2"], release_at=START + 60, deadline=None)
    assert await executor.Executor(scheduler, store, manual_clock).reconcile(item) is vocab.Disposition.PENDING
    hold = {r.step: r for r in await store.actions_for(WORKLOAD, 0, 1)}["requeue_hold"]
    assert hold.args[watchdog.HOLD_SEEN] == {"reason": "JobHeldUser", "detail": "job requeued in held state"}


async def test_deadline_sweep_leaves_a_person_hold_alone(scheduler, store, manual_clock, advise):
    """Requeue-held for a retry backoff; a person holds the job meanwhile; the deadline passes."""
    item = advise(REQUEUE, exclude_nodes=["node2"], release_at=START + 60)
    assert await executor.Executor(scheduler, store, manual_clock).reconcile(item) is vocab.Disposition.PENDING
    scheduler.person_holds(JOB_ID)
    manual_clock.advance(301)

    assert await watchdog.Watchdog(scheduler, store, manual_clock).sweep() == [item]

    job = scheduler.jobs[JOB_ID]
    assert job.held and job.hold_reason == "JobHeldAdmin"
    assert [m["operation"] for m in scheduler.mutations] == ["requeue_hold", "exclude_nodes"]
    [record] = await store.audit_records(workload=WORKLOAD, kind=vocab.AuditKind.WATCHDOG)
    assert record.payload["released_hold"] is False
    assert "JobHeldAdmin" in str(record.payload["left_human_hold"])
    assert record.payload["hold"] == {"reason": "JobHeldAdmin", "detail": "job requeued in held state"}
    release = {r.step: r for r in await store.actions_for(WORKLOAD, 0, 1)}[watchdog.LEAVE_STEP]
    assert release.status is actions.ActionStatus.SKIPPED and release.error.startswith(watchdog.LEFT_ALONE)


async def test_backoff_release_leaves_a_hold_placed_again_after_a_release(scheduler, store, manual_clock, advise):
    """A person released our hold and held the job again: the release step after the backoff leaves it."""
    item = advise(REQUEUE, exclude_nodes=["node2"], release_at=START + 60)
    run = executor.Executor(scheduler, store, manual_clock)
    assert await run.reconcile(item) is vocab.Disposition.PENDING
    scheduler.person_holds(JOB_ID, released_first=True)
    manual_clock.advance(61)

    assert await run.reconcile(item) is vocab.Disposition.ABANDONED

    assert scheduler.jobs[JOB_ID].held
    assert "release" not in [m["operation"] for m in scheduler.mutations]
    rows = {r.step: r for r in await store.actions_for(WORKLOAD, 0, 1)}
    assert rows["release"].status is actions.ActionStatus.SKIPPED
    assert watchdog.RELEASE_STEP not in rows and watchdog.LEAVE_STEP not in rows
    [record] = await store.audit_records(workload=WORKLOAD, kind=vocab.AuditKind.WATCHDOG)
    assert record.payload["released_hold"] is False and record.payload["left_human_hold"]


async def test_recover_leaves_a_person_hold_alone_once(scheduler, store, manual_clock, advise):
    scheduler.fail["exclude_nodes"] = base.SchedulerError("slurmctld not responding")
    scheduler.fail["release"] = base.SchedulerError("slurmctld not responding")
    item = advise(REQUEUE, exclude_nodes=["node2"])
    assert await executor.Executor(scheduler, store, manual_clock).reconcile(item) is vocab.Disposition.ABANDONED
    scheduler.fail.clear()
    scheduler.person_holds(JOB_ID)  # while we were down, a person held the job on top of our hold

    guard = watchdog.Watchdog(scheduler, store, manual_clock)
    assert await guard.recover() == []
    assert await guard.recover() == []  # a second start does not reconsider it

    assert scheduler.jobs[JOB_ID].held
    assert [m["operation"] for m in scheduler.mutations] == ["requeue_hold"]
    records = await store.audit_records(workload=WORKLOAD, kind=vocab.AuditKind.WATCHDOG)
    left = [r for r in records if r.payload.get("left_human_hold")]
    assert len(left) == 1 and left[0].payload["released_hold"] is False


async def test_our_own_hold_is_still_released_after_the_deadline(scheduler, store, manual_clock, advise):
    item = advise(REQUEUE, exclude_nodes=["node2"], release_at=START + 60)
    assert await executor.Executor(scheduler, store, manual_clock).reconcile(item) is vocab.Disposition.PENDING
    manual_clock.advance(301)

    assert await watchdog.Watchdog(scheduler, store, manual_clock).sweep() == [item]

    assert not scheduler.jobs[JOB_ID].held
    [record] = await store.audit_records(workload=WORKLOAD, kind=vocab.AuditKind.WATCHDOG)
    assert record.payload["released_hold"] is True and "left_human_hold" not in record.payload
