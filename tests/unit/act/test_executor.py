"""Executor decision paths, with a real SQLite audit store, a ManualClock and the in-memory FakeScheduler."""

from __future__ import annotations

import pytest

from tests.support import fake_scheduler
from trainguard.act import executor, watchdog
from trainguard.model import actions, clock, limits, vocab, workloads
from trainguard.schedulers import base
from trainguard.store import audit

JOB_ID = "42"
WORKLOAD = "slurm/test/42"
REQUEUE, HOLD, STOP, NONE = (vocab.AdviceAction.REQUEUE, vocab.AdviceAction.HOLD, vocab.AdviceAction.STOP,
                             vocab.AdviceAction.NONE)


def ops(scheduler: fake_scheduler.FakeScheduler) -> list[str]:
    return [m["operation"] for m in scheduler.mutations]


async def rows(store: audit.AuditStore, generation: int = 1) -> dict[str, actions.ActionRecord]:
    return {r.step: r for r in await store.actions_for(WORKLOAD, 0, generation)}


async def kinds(store: audit.AuditStore) -> list[str]:
    return [r.kind.value for r in await store.audit_records(workload=WORKLOAD)]


async def test_requeue_without_exclusions_requeues_once_and_verifies(make_executor, scheduler, store, advise):
    disposition = await make_executor.reconcile(advise(REQUEUE))

    assert disposition is vocab.Disposition.CONVERGED
    assert ops(scheduler) == ["requeue"]
    job = scheduler.jobs[JOB_ID]
    assert (job.attempt, job.state, job.held) == (1, workloads.JobState.PENDING, False)
    assert (await rows(store))["requeue"].status is actions.ActionStatus.DONE
    # advice first, then intent and result of the step, then the outcome
    assert await kinds(store) == ["advice", "action", "action", "outcome"]


async def test_requeue_with_exclusions_holds_excludes_and_releases(make_executor, scheduler, store, advise):
    disposition = await make_executor.reconcile(advise(REQUEUE, exclude_nodes=["node2"]))

    assert disposition is vocab.Disposition.CONVERGED
    assert ops(scheduler) == ["requeue_hold", "exclude_nodes", "release"]
    job = scheduler.jobs[JOB_ID]
    assert (job.attempt, job.held, job.excluded_nodes) == (1, False, ["node2"])
    recorded = await rows(store)
    assert list(recorded) == ["requeue_hold", "exclude_nodes", "release"]
    assert all(r.status is actions.ActionStatus.DONE for r in recorded.values())
    assert recorded["exclude_nodes"].args == {"job_id": JOB_ID, "excluded_nodes": ["node2"], "added_nodes": ["node2"]}
    action_records = await store.audit_records(workload=WORKLOAD, kind=vocab.AuditKind.ACTION)
    assert {r.payload["action"] for r in action_records} == {"requeue"}


async def test_the_users_own_exclusion_stays_and_is_not_recorded_as_ours(make_executor, scheduler, store, advise):
    scheduler.jobs[JOB_ID] = scheduler.jobs[JOB_ID].model_copy(update={"excluded_nodes": ["node4"]})
    disposition = await make_executor.reconcile(advise(REQUEUE, exclude_nodes=["node4", "node2"]))

    assert disposition is vocab.Disposition.CONVERGED
    assert scheduler.jobs[JOB_ID].excluded_nodes == ["node2", "node4"]
    recorded = await rows(store)
    assert recorded["exclude_nodes"].args["added_nodes"] == ["node2"]
    assert await store.own_exclusions(WORKLOAD) == ["node2"]


async def test_already_satisfied_touches_nothing(make_executor, scheduler, store, advise):
    scheduler.jobs[JOB_ID] = scheduler.jobs[JOB_ID].model_copy(
        update={"attempt": 1, "state": workloads.JobState.RUNNING, "nodes": ["node3"]})

    disposition = await make_executor.reconcile(advise(REQUEUE, exclude_nodes=["node2"]))

    assert disposition is vocab.Disposition.CONVERGED
    assert scheduler.mutating_calls() == []
    outcome = await store.get_outcome(WORKLOAD, 0, 1)
    assert outcome is not None and outcome.detail == "already satisfied"
    assert await rows(store) == {}


async def test_a_job_restarted_by_itself_elsewhere_is_still_kept_off_the_node_where_exclusions_outlive_it(
        make_executor, scheduler, store, advise):
    """A PyTorchJob's training-operator re-created the failed Worker elsewhere before the advice was
    carried out: on Kubernetes the exclusion (a taint) still keeps its next restart off the node, so
    it is made; the restart itself is the job's own and is not repeated."""
    scheduler.jobs[JOB_ID] = scheduler.jobs[JOB_ID].model_copy(update={
        "attempt": 1, "state": workloads.JobState.RUNNING, "nodes": ["node3"], "exclusions_while_running": True})

    disposition = await make_executor.reconcile(advise(REQUEUE, exclude_nodes=["node2"]))

    assert disposition is vocab.Disposition.CONVERGED
    assert ops(scheduler) == ["exclude_nodes"]
    assert scheduler.jobs[JOB_ID].excluded_nodes == ["node2"]
    assert (await rows(store))["exclude_nodes"].status is actions.ActionStatus.DONE


async def test_hold_holds_a_pending_job(make_executor, scheduler, advise):
    scheduler.jobs[JOB_ID] = scheduler.jobs[JOB_ID].model_copy(update={"state": workloads.JobState.PENDING})

    assert await make_executor.reconcile(advise(HOLD)) is vocab.Disposition.CONVERGED
    assert ops(scheduler) == ["hold"]
    assert scheduler.jobs[JOB_ID].held


async def test_stop_cancels_a_running_job(make_executor, scheduler, store, advise):
    scheduler.jobs[JOB_ID] = scheduler.jobs[JOB_ID].model_copy(update={"state": workloads.JobState.RUNNING})

    assert await make_executor.reconcile(advise(STOP)) is vocab.Disposition.CONVERGED
    assert ops(scheduler) == ["cancel"]
    assert scheduler.jobs[JOB_ID].state is workloads.JobState.CANCELLED
    assert (await rows(store))["cancel"].operation is actions.Operation.CANCEL


async def test_drain_nodes_with_our_tag(make_executor, scheduler, store, advise):
    disposition = await make_executor.reconcile(advise(REQUEUE, drain_nodes=["node2", "node1"]))

    assert disposition is vocab.Disposition.CONVERGED
    assert ops(scheduler) == ["requeue", "drain_node", "drain_node"]
    assert [scheduler.nodes[n].drained for n in ("node1", "node2", "node3")] == [True, True, False]
    assert scheduler.nodes["node1"].reason.startswith(base.OUR_REASON_PREFIX)
    assert set(await rows(store)) == {"requeue", "drain_node:node1", "drain_node:node2"}


async def test_monitor_mode_records_and_only_reads(make_executor, scheduler, store, advise):
    disposition = await make_executor.reconcile(
        advise(REQUEUE, mode=vocab.Mode.MONITOR, exclude_nodes=["node2"], drain_nodes=["node2"]))

    assert disposition is vocab.Disposition.MONITORED
    assert scheduler.calls and {call[0] for call in scheduler.calls} <= fake_scheduler.READS
    recorded = await rows(store)
    assert list(recorded) == ["requeue_hold", "exclude_nodes", "release", "drain_node:node2"]
    assert {(r.status, r.error) for r in recorded.values()} == {(actions.ActionStatus.SKIPPED, "skipped: monitor mode")}
    assert scheduler.jobs[JOB_ID].attempt == 0


async def test_verify_failure_is_abandoned(make_executor, scheduler, store, advise):
    scheduler.no_effect.add("requeue")  # the scheduler says yes but nothing happens

    disposition = await make_executor.reconcile(advise(REQUEUE))

    assert disposition is vocab.Disposition.ABANDONED
    outcome = await store.get_outcome(WORKLOAD, 0, 1)
    assert outcome is not None and outcome.decided_by is vocab.Decider.WATCHDOG
    assert outcome.detail.startswith("verify failed: restart count still 0")
    assert "watchdog" in await kinds(store)


async def test_scheduler_error_releases_our_hold(make_executor, scheduler, store, advise):
    scheduler.fail["exclude_nodes"] = base.SchedulerError("Invalid node name specified")

    disposition = await make_executor.reconcile(advise(REQUEUE, exclude_nodes=["node2"]))

    assert disposition is vocab.Disposition.ABANDONED
    assert ops(scheduler) == ["requeue_hold", "release"]
    assert not scheduler.jobs[JOB_ID].held
    recorded = await rows(store)
    assert recorded["exclude_nodes"].status is actions.ActionStatus.FAILED
    assert "Invalid node name" in recorded["exclude_nodes"].error
    assert recorded[watchdog.RELEASE_STEP].status is actions.ActionStatus.DONE
    assert recorded[watchdog.RELEASE_STEP].decided_by is vocab.Decider.WATCHDOG
    assert "release" not in recorded  # the plan's own release never ran


async def test_job_gone_is_abandoned_without_actions(make_executor, scheduler, store, advise):
    del scheduler.jobs[JOB_ID]

    assert await make_executor.reconcile(advise(STOP)) is vocab.Disposition.ABANDONED
    outcome = await store.get_outcome(WORKLOAD, 0, 1)
    assert outcome is not None and "JobGone" in outcome.detail
    assert scheduler.mutating_calls() == []


async def test_deadline_passed_before_start_does_nothing(make_executor, scheduler, manual_clock, advise):
    manual_clock.advance(301)

    assert await make_executor.reconcile(advise(REQUEUE)) is vocab.Disposition.ABANDONED
    assert scheduler.mutating_calls() == []


async def test_deadline_passing_mid_way_releases_the_hold(
    make_executor, scheduler, store, manual_clock: clock.ManualClock, advise,
):
    scheduler.after["requeue_hold"] = lambda: manual_clock.advance(600)

    disposition = await make_executor.reconcile(advise(REQUEUE, exclude_nodes=["node2"]))

    assert disposition is vocab.Disposition.ABANDONED
    assert ops(scheduler) == ["requeue_hold", "release"]
    assert not scheduler.jobs[JOB_ID].held
    outcome = await store.get_outcome(WORKLOAD, 0, 1)
    assert outcome is not None and outcome.detail == "deadline passed before step exclude_nodes"


async def test_restart_after_the_call_does_not_repeat_it(scheduler, store, manual_clock, advise):
    item = advise(REQUEUE, exclude_nodes=["node2"])
    await store.record_advice(item, at=manual_clock.now())
    step_row = actions.ActionRecord(workload=WORKLOAD, attempt=0, generation=1, step="requeue_hold",
                                    operation=actions.Operation.REQUEUE_HOLD, args={"job_id": JOB_ID})
    await store.begin_action(step_row, at=manual_clock.now())
    await scheduler.requeue_hold(JOB_ID)  # the call happened; the process died before recording it

    disposition = await executor.Executor(scheduler, store, manual_clock).reconcile(item)

    assert disposition is vocab.Disposition.CONVERGED
    assert ops(scheduler) == ["requeue_hold", "exclude_nodes", "release"]
    recorded = await rows(store)
    assert recorded["requeue_hold"].status is actions.ActionStatus.DONE
    assert recorded["requeue_hold"].error == "took effect before a restart"


async def test_restart_before_the_call_makes_it_once(scheduler, store, manual_clock, advise):
    item = advise(REQUEUE)
    await store.record_advice(item, at=manual_clock.now())
    await store.begin_action(actions.ActionRecord(workload=WORKLOAD, attempt=0, generation=1, step="requeue",
                                                  operation=actions.Operation.REQUEUE, args={"job_id": JOB_ID}),
                             at=manual_clock.now())

    assert await executor.Executor(scheduler, store, manual_clock).reconcile(item) is vocab.Disposition.CONVERGED
    assert ops(scheduler) == ["requeue"]


async def test_reconcile_twice_acts_once(make_executor, scheduler, advise):
    item = advise(REQUEUE, exclude_nodes=["node2"])
    first = await make_executor.reconcile(item)
    second = await make_executor.reconcile(item)

    assert first is second is vocab.Disposition.CONVERGED
    assert ops(scheduler) == ["requeue_hold", "exclude_nodes", "release"]


async def test_blast_radius_block_is_recorded_and_nothing_is_done(scheduler, store, manual_clock, advise):
    disposition = await executor.Executor(scheduler, store, manual_clock, blast_limit=_blocking).reconcile(
        advise(REQUEUE))

    assert disposition is vocab.Disposition.ABANDONED
    assert scheduler.mutating_calls() == []
    recorded = await rows(store)
    assert recorded["requeue"].status is actions.ActionStatus.SKIPPED
    assert recorded["requeue"].error == "blocked: 20 actions in the last hour (max 20)"
    [outcome] = await store.audit_records(workload=WORKLOAD, kind=vocab.AuditKind.OUTCOME)
    assert outcome.payload["blast_radius"]["would_block"] is True
    assert outcome.payload["blast_radius"]["checks"][0]["in_window"] == 20


async def _blocking(_: object) -> limits.LimitReport:
    reason = "20 actions in the last hour (max 20)"
    return limits.LimitReport(checks=[limits.LimitCheck(limit=limits.ACTIONS_PER_HOUR, maximum=20, planned=1,
                                                        in_window=20, would_block=True, reason=reason)])


async def test_monitor_mode_evaluates_the_limits_and_records_the_would_block(scheduler, store, manual_clock, advise):
    disposition = await executor.Executor(scheduler, store, manual_clock, blast_limit=_blocking).reconcile(
        advise(REQUEUE, mode=vocab.Mode.MONITOR))

    assert disposition is vocab.Disposition.MONITORED
    assert scheduler.mutating_calls() == []
    recorded = await rows(store)
    assert recorded["requeue"].error == (
        f"{executor.MONITOR_SKIP}; would be blocked: 20 actions in the last hour (max 20)")
    [outcome] = await store.audit_records(workload=WORKLOAD, kind=vocab.AuditKind.OUTCOME)
    assert outcome.payload["blast_radius"]["would_block"] is True
    assert "Action mode would be blocked" in outcome.payload["detail"]


async def test_monitor_mode_records_even_when_the_limits_cannot_be_evaluated(scheduler, store, manual_clock, advise):
    async def broken(_: object) -> limits.LimitReport:
        raise RuntimeError("scheduler unreachable")

    disposition = await executor.Executor(scheduler, store, manual_clock, blast_limit=broken).reconcile(
        advise(REQUEUE, mode=vocab.Mode.MONITOR))

    assert disposition is vocab.Disposition.MONITORED
    assert (await rows(store))["requeue"].error == executor.MONITOR_SKIP


async def test_unknown_job_id_is_abandoned(scheduler, store, manual_clock, advise):
    item = advise(STOP).model_copy(update={"workload": "slurm/test/untracked"})

    assert await executor.Executor(scheduler, store, manual_clock).reconcile(item) is vocab.Disposition.ABANDONED
    assert scheduler.calls == []


async def test_none_advice_converges_without_calls(make_executor, scheduler, advise):
    assert await make_executor.reconcile(advise(NONE)) is vocab.Disposition.CONVERGED
    assert scheduler.mutating_calls() == []


@pytest.mark.parametrize("state", [workloads.JobState.RUNNING, workloads.JobState.FAILED])
async def test_hold_of_a_non_pending_job_fails_cleanly(make_executor, scheduler, store, advise, state):
    scheduler.jobs[JOB_ID] = scheduler.jobs[JOB_ID].model_copy(update={"state": state})

    assert await make_executor.reconcile(advise(HOLD)) is vocab.Disposition.ABANDONED
    assert (await rows(store))["hold"].status is actions.ActionStatus.FAILED
    assert not scheduler.jobs[JOB_ID].held
