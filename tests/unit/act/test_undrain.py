"""act.undrain: a node we drained is resumed once the policy's undrainAfter has passed; a node a
person drained, re-labelled or resumed is never touched; Monitor mode records would-resume only.

The drain itself is a real one of the executor (an advice with ``drain_nodes``) into the real
SQLite audit store, so the undrainer reads exactly the rows production writes.
"""

from __future__ import annotations

import logging

import pytest

from tests.support import fake_scheduler
from tests.unit.act.conftest import AdviceFactory
from trainguard.act import executor, undrain
from trainguard.model import actions, advice, clock, lifecycle, vocab, workloads
from trainguard.store import audit

HOUR = 3600.0
ACTING = undrain.UndrainRule(after_s=HOUR, mode=vocab.Mode.ACTION)


async def _drain(make_executor: executor.Executor, store: audit.AuditStore, advise: AdviceFactory,
                 manual_clock: clock.ManualClock, node: str = "node2") -> None:
    item = advise(vocab.AdviceAction.STOP, drain_nodes=[node])
    await store.record_advice(item, at=manual_clock.now())
    assert await make_executor.reconcile(item) is vocab.Disposition.CONVERGED


def _undrainer(scheduler: fake_scheduler.FakeScheduler, store: audit.AuditStore, manual_clock: clock.ManualClock,
               rules: dict[str, undrain.UndrainRule]) -> undrain.Undrainer:
    return undrain.Undrainer(scheduler, store, manual_clock, rules.get)


def _resumes(scheduler: fake_scheduler.FakeScheduler) -> list[str]:
    return [m["target"] for m in scheduler.mutations if m["operation"] == "resume_node"]


async def _resume_rows(store: audit.AuditStore) -> list[actions.ActionRecord]:
    return await store.actions_by_operation([actions.Operation.RESUME_NODE])


async def test_our_drain_is_resumed_once_undrain_after_has_passed(
    make_executor: executor.Executor, store: audit.AuditStore, advise: AdviceFactory,
    manual_clock: clock.ManualClock, scheduler: fake_scheduler.FakeScheduler,
) -> None:
    await _drain(make_executor, store, advise, manual_clock)
    assert scheduler.nodes["node2"].drained
    sweeper = _undrainer(scheduler, store, manual_clock, {"default": ACTING})

    manual_clock.advance(HOUR - 1)
    assert await sweeper.sweep() == []
    assert _resumes(scheduler) == []

    manual_clock.advance(2)
    [row] = await sweeper.sweep()
    assert (row.step, row.status, row.operation) == ("resume_node:node2", actions.ActionStatus.DONE,
                                                     actions.Operation.RESUME_NODE)
    assert row.args["node"] == "node2" and row.args["undrain_after_s"] == HOUR
    assert _resumes(scheduler) == ["node2"] and not scheduler.nodes["node2"].drained
    # recorded in the audit stream as our action, under the advice that drained the node
    records = [r for r in await store.audit_records(kind=vocab.AuditKind.ACTION)
               if r.payload["operation"] == "resume_node"]
    assert [r.payload["status"] for r in records] == ["intent", "done"]

    manual_clock.advance(HOUR)
    assert await sweeper.sweep() == []  # once per drain
    assert _resumes(scheduler) == ["node2"]


async def test_a_node_a_person_drained_is_never_resumed(
    make_executor: executor.Executor, store: audit.AuditStore, advise: AdviceFactory,
    manual_clock: clock.ManualClock, scheduler: fake_scheduler.FakeScheduler,
) -> None:
    scheduler.nodes["node3"] = scheduler.nodes["node3"].model_copy(
        update={"drained": True, "state": "DRAIN", "reason": "maintenance"})
    await _drain(make_executor, store, advise, manual_clock, node="node2")
    sweeper = _undrainer(scheduler, store, manual_clock, {"default": ACTING})
    manual_clock.advance(10 * HOUR)
    await sweeper.sweep()
    assert _resumes(scheduler) == ["node2"]
    assert scheduler.nodes["node3"].drained and scheduler.nodes["node3"].reason == "maintenance"
    assert ("resume_node", "node3") not in scheduler.calls


async def test_a_drain_a_person_took_over_is_left_alone_and_that_is_recorded_once(
    make_executor: executor.Executor, store: audit.AuditStore, advise: AdviceFactory,
    manual_clock: clock.ManualClock, scheduler: fake_scheduler.FakeScheduler,
) -> None:
    await _drain(make_executor, store, advise, manual_clock)
    scheduler.nodes["node2"] = scheduler.nodes["node2"].model_copy(update={"reason": "bad DIMM, RMA 1234"})
    sweeper = _undrainer(scheduler, store, manual_clock, {"default": ACTING})
    manual_clock.advance(2 * HOUR)

    [row] = await sweeper.sweep()
    assert row.status is actions.ActionStatus.SKIPPED
    assert row.error == "left alone: node2's drain reason is no longer ours ('bad DIMM, RMA 1234')"
    assert not any(call[0] == "resume_node" for call in scheduler.calls)
    assert await sweeper.sweep() == []
    assert len(await _resume_rows(store)) == 1


async def test_a_node_someone_already_resumed_is_left_alone(
    make_executor: executor.Executor, store: audit.AuditStore, advise: AdviceFactory,
    manual_clock: clock.ManualClock, scheduler: fake_scheduler.FakeScheduler,
) -> None:
    await _drain(make_executor, store, advise, manual_clock)
    await scheduler.resume_node("node2")
    scheduler.calls.clear()
    manual_clock.advance(2 * HOUR)
    [row] = await _undrainer(scheduler, store, manual_clock, {"default": ACTING}).sweep()
    assert row.status is actions.ActionStatus.SKIPPED and "no longer drained" in row.error
    assert not any(call[0] == "resume_node" for call in scheduler.calls)


async def test_monitor_mode_records_would_resume_and_changes_nothing_until_action(
    make_executor: executor.Executor, store: audit.AuditStore, advise: AdviceFactory,
    manual_clock: clock.ManualClock, scheduler: fake_scheduler.FakeScheduler,
) -> None:
    await _drain(make_executor, store, advise, manual_clock)
    rules = {"default": undrain.UndrainRule(after_s=HOUR, mode=vocab.Mode.MONITOR)}
    sweeper = _undrainer(scheduler, store, manual_clock, rules)
    manual_clock.advance(2 * HOUR)
    [row] = await sweeper.sweep()
    assert (row.step, row.status) == ("would_resume_node:node2", actions.ActionStatus.SKIPPED)
    assert row.error.startswith("Monitor mode: would resume node2")
    assert await sweeper.sweep() == []
    assert scheduler.nodes["node2"].drained and _resumes(scheduler) == []

    rules["default"] = ACTING  # the policy (or the cluster-wide switch) now allows acting
    [row] = await sweeper.sweep()
    assert (row.step, row.status) == ("resume_node:node2", actions.ActionStatus.DONE)
    assert not scheduler.nodes["node2"].drained


@pytest.mark.parametrize("rules", [{"default": undrain.UndrainRule(None, vocab.Mode.ACTION)}, {}],
                         ids=["undrainAfter-null", "policy-gone"])
async def test_no_resume_without_a_rule(
    make_executor: executor.Executor, store: audit.AuditStore, advise: AdviceFactory,
    manual_clock: clock.ManualClock, scheduler: fake_scheduler.FakeScheduler, rules: dict[str, undrain.UndrainRule],
) -> None:
    await _drain(make_executor, store, advise, manual_clock)
    manual_clock.advance(1000 * HOUR)
    assert await _undrainer(scheduler, store, manual_clock, rules).sweep() == []
    assert scheduler.nodes["node2"].drained


async def test_a_failed_resume_is_recorded_and_not_repeated(
    make_executor: executor.Executor, store: audit.AuditStore, advise: AdviceFactory,
    manual_clock: clock.ManualClock, scheduler: fake_scheduler.FakeScheduler,
) -> None:
    await _drain(make_executor, store, advise, manual_clock)
    scheduler.fail["resume_node"] = RuntimeError("slurm_update error: Invalid node state specified")
    sweeper = _undrainer(scheduler, store, manual_clock, {"default": ACTING})
    manual_clock.advance(2 * HOUR)
    [row] = await sweeper.sweep()
    assert row.status is actions.ActionStatus.FAILED and "Invalid node state" in row.error
    assert await sweeper.sweep() == []



async def _intent(store: audit.AuditStore, manual_clock: clock.ManualClock, node: str) -> None:
    """What a process that died after committing the resume intent, before calling the scheduler, leaves."""
    await store.begin_action(actions.ActionRecord(
        workload="slurm/test/42", attempt=0, generation=1, step=f"resume_node:{node}",
        operation=actions.Operation.RESUME_NODE, args={"node": node}), at=manual_clock.now())


async def test_an_intent_left_by_a_crash_is_carried_out_after_the_restart(
    make_executor: executor.Executor, store: audit.AuditStore, advise: AdviceFactory,
    manual_clock: clock.ManualClock, scheduler: fake_scheduler.FakeScheduler,
) -> None:
    await _drain(make_executor, store, advise, manual_clock)
    manual_clock.advance(2 * HOUR)
    await _intent(store, manual_clock, "node2")
    [row] = await _undrainer(scheduler, store, manual_clock, {"default": ACTING}).sweep()
    assert (row.step, row.status) == ("resume_node:node2", actions.ActionStatus.DONE)
    assert _resumes(scheduler) == ["node2"]
    assert len(await _resume_rows(store)) == 1


async def test_an_intent_left_by_a_crash_is_settled_when_the_node_is_no_longer_our_drain(
    make_executor: executor.Executor, store: audit.AuditStore, advise: AdviceFactory,
    manual_clock: clock.ManualClock, scheduler: fake_scheduler.FakeScheduler,
) -> None:
    await _drain(make_executor, store, advise, manual_clock)
    manual_clock.advance(2 * HOUR)
    await _intent(store, manual_clock, "node2")
    scheduler.nodes["node2"] = scheduler.nodes["node2"].model_copy(update={"reason": "maintenance"})
    sweeper = _undrainer(scheduler, store, manual_clock, {"default": ACTING})
    [row] = await sweeper.sweep()
    assert row.status is actions.ActionStatus.SKIPPED and "no longer ours" in row.error
    assert await sweeper.sweep() == []
    assert not any(call[0] == "resume_node" for call in scheduler.calls)


K8S_WORKLOAD = "k8s/team/JobSet/train"


async def _kubernetes_exclusion(store: audit.AuditStore, manual_clock: clock.ManualClock, node: str
                                ) -> tuple[fake_scheduler.FakeScheduler, executor.Executor]:
    """A Kubernetes workload's requeue that excludes ``node``, carried out by the real executor; the
    node then shows as the Kubernetes adapter shows it (cordoned and tainted by us, for everyone)."""
    await store.upsert_workload(workload=K8S_WORKLOAD, scheduler="fake", job_id=K8S_WORKLOAD, policy="default",
                                comment="trainguard", at=manual_clock.now())
    job = workloads.JobSnapshot(workload=K8S_WORKLOAD, job_id=K8S_WORKLOAD, state=workloads.JobState.RUNNING,
                                attempt=0, nodes=["node1", node], comment="trainguard", exclusions_while_running=True)
    scheduler = fake_scheduler.FakeScheduler([job], ["node1", "node2", "node3", "node4"])
    acting = executor.Executor(scheduler, store, manual_clock)
    item = advice.Advice(workload=K8S_WORKLOAD, attempt=0, generation=1, action=vocab.AdviceAction.REQUEUE,
                             exclude_nodes=[node], mode=vocab.Mode.ACTION, deadline=manual_clock.now() + 300,
                             policy="default", reasons=["test"])
    await store.record_advice(item, at=manual_clock.now())
    assert await acting.reconcile(item) is vocab.Disposition.CONVERGED
    scheduler.nodes[node] = scheduler.nodes[node].model_copy(
        update={"drained": True, "state": "IDLE+DRAIN", "reason": "trainguard: suspect node of " + K8S_WORKLOAD})
    return scheduler, acting


async def test_a_kubernetes_exclusion_is_lifted_by_undrain_after_and_waits_for_a_down_node(
    store: audit.AuditStore, manual_clock: clock.ManualClock,
) -> None:
    """On Kubernetes an exclusion cordons and taints the node for everyone: it ends by the drains' rule
    (undrainAfter of its policy, an intent row first), not by a fixed TTL outside the executor."""
    scheduler, _ = await _kubernetes_exclusion(store, manual_clock, "node2")
    sweeper = _undrainer(scheduler, store, manual_clock, {"default": ACTING})
    manual_clock.advance(HOUR - 1)
    assert await sweeper.sweep() == []
    scheduler.nodes["node2"] = scheduler.nodes["node2"].model_copy(update={"state": "DOWN+DRAIN"})
    manual_clock.advance(2)
    assert await sweeper.sweep() == []  # not Ready: waits
    scheduler.nodes["node2"] = scheduler.nodes["node2"].model_copy(update={"state": "IDLE+DRAIN"})
    [row] = await sweeper.sweep()
    assert (row.workload, row.step, row.status) == (K8S_WORKLOAD, "resume_node:node2", actions.ActionStatus.DONE)
    assert _resumes(scheduler) == ["node2"]


async def test_a_kubernetes_exclusion_stays_when_undrain_after_is_null_and_a_slurm_exclusion_is_never_lifted(
    make_executor: executor.Executor, store: audit.AuditStore, advise: AdviceFactory,
    manual_clock: clock.ManualClock, scheduler: fake_scheduler.FakeScheduler,
) -> None:
    kube, _ = await _kubernetes_exclusion(store, manual_clock, "node3")
    never = undrain.UndrainRule(after_s=None, mode=vocab.Mode.ACTION)
    manual_clock.advance(100 * HOUR)
    assert await _undrainer(kube, store, manual_clock, {"default": never}).sweep() == []
    assert _resumes(kube) == []
    # a Slurm job's ExcNodeList is the job's own: nothing of the node's to put back
    scheduler.jobs["42"] = scheduler.jobs["42"].model_copy(update={"state": workloads.JobState.PENDING})
    item = advise(vocab.AdviceAction.REQUEUE, exclude_nodes=["node2"], generation=2)
    await store.record_advice(item, at=manual_clock.now())
    await make_executor.reconcile(item)
    assert undrain.nodes_out("exclude_nodes", {"job_id": "42", "excluded_nodes": ["node2"]}) == []
    manual_clock.advance(100 * HOUR)
    assert all(r.workload == K8S_WORKLOAD for r in await store.actions_by_operation([actions.Operation.RESUME_NODE]))
    await _undrainer(scheduler, store, manual_clock, {"default": ACTING}).sweep()
    assert _resumes(scheduler) == []


async def _states(store: audit.AuditStore, node: str) -> list[tuple[str, str]]:
    return [(t.event.value, t.state.value) for t in await store.node_transitions(node)]


async def test_the_lifecycle_follows_our_drain_and_our_resume(
    make_executor: executor.Executor, store: audit.AuditStore, advise: AdviceFactory,
    manual_clock: clock.ManualClock, scheduler: fake_scheduler.FakeScheduler,
) -> None:
    await _drain(make_executor, store, advise, manual_clock)
    assert await _states(store, "node2") == [("taken-out", "out-of-service")]
    manual_clock.advance(HOUR + 1)
    await _undrainer(scheduler, store, manual_clock, {"default": ACTING}).sweep()
    assert await _states(store, "node2") == [("taken-out", "out-of-service"), ("resumed", "in-service")]
    assert "undrainAfter" in (await store.node_transitions("node2"))[-1].reason


async def test_a_node_held_for_repair_is_never_resumed_by_time_and_a_persons_clearance_returns_it_at_once(
    make_executor: executor.Executor, store: audit.AuditStore, advise: AdviceFactory,
    manual_clock: clock.ManualClock, scheduler: fake_scheduler.FakeScheduler,
) -> None:
    await _drain(make_executor, store, advise, manual_clock)
    held = await store.decide_node("node2", lifecycle.NodeEvent.HELD, by="alice", channel="cli",
                                   at=manual_clock.now(), reason="DIMM errors, ticket 77")
    assert (held.state, held.by) == (lifecycle.NodeState.HELD_FOR_REPAIR, "alice")
    sweeper = _undrainer(scheduler, store, manual_clock, {"default": ACTING})
    manual_clock.advance(10 * HOUR)
    assert await sweeper.sweep() == []
    assert _resumes(scheduler) == [] and scheduler.nodes["node2"].drained

    await store.decide_node("node2", lifecycle.NodeEvent.CLEARED, by="bob", channel="cli", at=manual_clock.now(),
                            reason="DIMM replaced")
    [row] = await sweeper.sweep()
    assert row.status is actions.ActionStatus.DONE and _resumes(scheduler) == ["node2"]
    assert await _states(store, "node2") == [("taken-out", "out-of-service"), ("held", "held-for-repair"),
                                             ("cleared", "out-of-service"), ("resumed", "in-service")]


async def test_a_clearance_returns_a_node_before_undrain_after_and_even_without_it(
    make_executor: executor.Executor, store: audit.AuditStore, advise: AdviceFactory,
    manual_clock: clock.ManualClock, scheduler: fake_scheduler.FakeScheduler, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=undrain.__name__)  # the resume's log line is formatted, whatever ran before
    await _drain(make_executor, store, advise, manual_clock)
    never = undrain.UndrainRule(after_s=None, mode=vocab.Mode.ACTION)
    sweeper = _undrainer(scheduler, store, manual_clock, {"default": never})
    assert await sweeper.sweep() == []
    await store.decide_node("node2", lifecycle.NodeEvent.CLEARED, by="bob", channel="cli", at=manual_clock.now(),
                            reason="false alarm")
    [row] = await sweeper.sweep()
    assert row.status is actions.ActionStatus.DONE and _resumes(scheduler) == ["node2"]
    assert any("resumed node2" in m and "cleared by a person" in m for m in caplog.messages), caplog.messages


async def test_a_node_someone_else_took_over_or_resumed_shows_in_the_lifecycle(
    make_executor: executor.Executor, store: audit.AuditStore, advise: AdviceFactory,
    manual_clock: clock.ManualClock, scheduler: fake_scheduler.FakeScheduler,
) -> None:
    await _drain(make_executor, store, advise, manual_clock, node="node2")
    scheduler.nodes["node2"] = scheduler.nodes["node2"].model_copy(update={"reason": "bad DIMM, RMA 1234"})
    manual_clock.advance(2 * HOUR)
    await _undrainer(scheduler, store, manual_clock, {"default": ACTING}).sweep()
    latest = await store.node_state("node2")
    assert latest is not None and latest.state is lifecycle.NodeState.OTHER and "RMA 1234" in latest.reason
    with pytest.raises(lifecycle.Refused):  # someone else's: a person's hold through us has nothing to hold
        await store.decide_node("node2", lifecycle.NodeEvent.HELD, by="alice", channel="cli",
                                at=manual_clock.now(), reason="x")
    assert (await store.node_state("node2")) == latest  # nothing written


async def test_a_node_out_for_someone_elses_reason_is_shown_as_other_and_back_when_it_returns(
    store: audit.AuditStore, manual_clock: clock.ManualClock, scheduler: fake_scheduler.FakeScheduler,
) -> None:
    scheduler.nodes["node3"] = scheduler.nodes["node3"].model_copy(
        update={"drained": True, "state": "DRAIN", "reason": "maintenance"})
    sweeper = _undrainer(scheduler, store, manual_clock, {"default": ACTING})
    assert await sweeper.sweep() == []
    await sweeper.sweep()  # seen twice: one row
    assert await _states(store, "node3") == [("seen-other", "other")]
    assert "maintenance" in (await store.node_transitions("node3"))[0].reason
    assert not any(call[0] == "resume_node" for call in scheduler.calls)  # never touched
    scheduler.nodes["node3"] = scheduler.nodes["node3"].model_copy(  # their own return (scontrol, not us)
        update={"drained": False, "state": "IDLE", "reason": ""})
    await sweeper.sweep()
    assert await _states(store, "node3") == [("seen-other", "other"), ("seen-back", "in-service")]


async def test_a_node_taken_out_again_within_the_lemon_window_after_its_return_is_held_until_a_person_clears_it(
    make_executor: executor.Executor, store: audit.AuditStore, advise: AdviceFactory,
    manual_clock: clock.ManualClock, scheduler: fake_scheduler.FakeScheduler,
) -> None:
    rule = undrain.UndrainRule(after_s=HOUR, mode=vocab.Mode.ACTION, lemon_window_s=24 * HOUR)
    sweeper = _undrainer(scheduler, store, manual_clock, {"default": rule})
    await _drain(make_executor, store, advise, manual_clock)
    manual_clock.advance(HOUR + 1)
    [first] = await sweeper.sweep()
    assert first.status is actions.ActionStatus.DONE  # the first return: by time
    manual_clock.advance(HOUR)
    second = advise(vocab.AdviceAction.STOP, drain_nodes=["node2"], generation=2, deadline=manual_clock.now() + 300)
    await store.record_advice(second, at=manual_clock.now())
    assert await make_executor.reconcile(second) is vocab.Disposition.CONVERGED  # named and drained again
    manual_clock.advance(10 * HOUR)
    assert await sweeper.sweep() == []
    assert _resumes(scheduler) == ["node2"] and scheduler.nodes["node2"].drained
    latest = await store.node_state("node2")
    assert latest is not None and latest.state is lifecycle.NodeState.HELD_FOR_REPAIR
    assert latest.event is lifecycle.NodeEvent.REPEAT_OFFENDER and "repeat offender" in latest.reason
    assert await sweeper.sweep() == []  # held: recorded once, never resumed by time
    assert [e for e, _ in await _states(store, "node2")].count("repeat-offender") == 1

    await store.decide_node("node2", lifecycle.NodeEvent.CLEARED, by="bob", channel="cli", at=manual_clock.now(),
                            reason="GPU replaced")
    [row] = await sweeper.sweep()
    assert row.status is actions.ActionStatus.DONE and _resumes(scheduler) == ["node2", "node2"]


async def test_a_node_taken_out_again_after_the_lemon_window_returns_by_time(
    make_executor: executor.Executor, store: audit.AuditStore, advise: AdviceFactory,
    manual_clock: clock.ManualClock, scheduler: fake_scheduler.FakeScheduler,
) -> None:
    rule = undrain.UndrainRule(after_s=HOUR, mode=vocab.Mode.ACTION, lemon_window_s=2 * HOUR)
    sweeper = _undrainer(scheduler, store, manual_clock, {"default": rule})
    await _drain(make_executor, store, advise, manual_clock)
    manual_clock.advance(HOUR + 1)
    await sweeper.sweep()
    manual_clock.advance(3 * HOUR)
    second = advise(vocab.AdviceAction.STOP, drain_nodes=["node2"], generation=2, deadline=manual_clock.now() + 300)
    await store.record_advice(second, at=manual_clock.now())
    assert await make_executor.reconcile(second) is vocab.Disposition.CONVERGED
    manual_clock.advance(HOUR + 1)
    [row] = await sweeper.sweep()
    assert row.status is actions.ActionStatus.DONE and _resumes(scheduler) == ["node2", "node2"]


async def test_each_node_taken_out_and_put_back_is_told_once_done_and_a_failing_listener_changes_nothing(
    scheduler: fake_scheduler.FakeScheduler, store: audit.AuditStore, advise: AdviceFactory,
    manual_clock: clock.ManualClock,
) -> None:
    """The operator's NodeOutOfService / NodeReturned Events come from these calls (engine.recovery)."""
    told: list[tuple[str, actions.ActionStatus]] = []

    async def listener(row: actions.ActionRecord) -> None:
        told.append((row.step, row.status))
        raise RuntimeError("the API server is away")  # the report is lost, not the change

    drainer = executor.Executor(scheduler, store, manual_clock, on_node_change=listener)
    await _drain(drainer, store, advise, manual_clock)
    assert told == [("drain_node:node2", actions.ActionStatus.DONE)]  # not its intent, not the cancel
    assert scheduler.nodes["node2"].drained

    sweeper = undrain.Undrainer(scheduler, store, manual_clock, {"default": ACTING}.get, on_node_change=listener)
    manual_clock.advance(HOUR + 1)
    [row] = await sweeper.sweep()
    assert row.status is actions.ActionStatus.DONE and not scheduler.nodes["node2"].drained
    assert told[1:] == [("resume_node:node2", actions.ActionStatus.DONE)]
