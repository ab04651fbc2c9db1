"""act.validate through the undrain sweep: a node we drained passes the site's check before its return, or is
held for repair with the check's evidence, or is drained again when the check gives no verdict; a person's
change during the round is left alone; our reservation never outlives a round; a restart at any step resumes
without repeating it; Monitor mode records would-validate only; a scheduler without the operations returns
nodes by time, saying so.

The drain is a real one of the executor into the real SQLite audit store (as in ``test_undrain.py``); the
scheduler is the in-memory fake of our own Protocols, here with the validation operations.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import pytest

from tests.support import fake_scheduler
from tests.unit.act import conftest
from tests.unit.act.conftest import AdviceFactory
from trainguard.act import executor, undrain, validate
from trainguard.model import actions, checks, clock, lifecycle, vocab, workloads
from trainguard.schedulers import base
from trainguard.store import audit

HOUR = 3600.0
CHECK = validate.Check(("/opt/site/check.sh", "--level", "2"), timeout_s=1800.0, output_dir="/shared/tg")
VALIDATING = undrain.UndrainRule(after_s=HOUR, mode=vocab.Mode.ACTION, validation=CHECK)


class FakeValidator(fake_scheduler.FakeScheduler):
    """The fake scheduler with ``ports.NodeValidator``: reservations and check jobs held in memory; a test
    ends a check with ``end``."""

    def __init__(self, jobs: Iterable[workloads.JobSnapshot], nodes: Iterable[str]) -> None:
        super().__init__(jobs, nodes)
        self.reservations: set[str] = set()
        self.checks: dict[str, dict[str, Any]] = {}
        self.crash_after: set[str] = set()
        """Operations that take effect and then raise (the process killed right after the scheduler acted)."""

    def _did(self, operation: str, target: str) -> None:
        self.mutations.append({"operation": operation, "target": target})
        if operation in self.crash_after:
            self.crash_after.discard(operation)
            raise base.SchedulerError(f"{operation}: connection lost after the command ran")

    async def reserve_node(self, node: str, minutes: int) -> str:
        self._call("reserve_node", node, minutes)
        if node not in self.reservations:
            self.reservations.add(node)
            self._did("reserve_node", node)
        return f"trainguard-validate-{node}"

    async def unreserve_node(self, node: str) -> None:
        self._call("unreserve_node", node)
        if node in self.reservations:
            self.reservations.discard(node)
            self._did("unreserve_node", node)

    async def submit_check(self, node: str, command: Any, *, tag: str, minutes: int, output_dir: str,
                           partition: str | None, image: str | None = None) -> str:
        self._call("submit_check", node, tag)
        assert node in self.reservations and not self.nodes[node].drained  # the order Slurm needs
        job = str(100 + len(self.checks))
        self.checks[job] = {"tag": tag, "node": node, "status": checks.CheckStatus(checks.CheckPhase.WAITING,
                                                                                    state="RUNNING")}
        self._did("submit_check", job)
        return job

    async def find_check(self, tag: str) -> str | None:
        self._call("find_check", tag)
        return next((job for job, c in self.checks.items() if c["tag"] == tag), None)

    async def check_status(self, job_id: str) -> checks.CheckStatus:
        self._call("check_status", job_id)
        return self.checks[job_id]["status"] if job_id in self.checks else checks.CheckStatus(checks.CheckPhase.GONE)

    async def cancel_check(self, job_id: str) -> None:
        self._call("cancel_check", job_id)
        if self.checks[job_id]["status"].phase is checks.CheckPhase.WAITING:
            self.end(job_id, checks.CheckPhase.NO_VERDICT, state="CANCELLED")
            self._did("cancel_check", job_id)

    def end(self, job_id: str, phase: checks.CheckPhase, *, code: int | None = None, state: str = "",
            tail: str = "") -> None:
        self.checks[job_id]["status"] = checks.CheckStatus(phase, state=state, exit_code=code, output_tail=tail)


@pytest.fixture
def scheduler() -> FakeValidator:
    job = workloads.JobSnapshot(workload=conftest.WORKLOAD, job_id=conftest.JOB_ID, state=workloads.JobState.FAILED,
                                attempt=0, nodes=["node1", "node2"], comment="trainguard", exit_code=1)
    return FakeValidator([job], conftest.NODES)


async def _drain(make_executor: executor.Executor, store: audit.AuditStore, advise: AdviceFactory,
                 manual_clock: clock.ManualClock, node: str = "node2") -> None:
    item = advise(vocab.AdviceAction.STOP, drain_nodes=[node])
    await store.record_advice(item, at=manual_clock.now())
    assert await make_executor.reconcile(item) is vocab.Disposition.CONVERGED


def _sweeper(scheduler: FakeValidator, store: audit.AuditStore, manual_clock: clock.ManualClock,
             rules: dict[str, undrain.UndrainRule], *, validator: bool = True) -> undrain.Undrainer:
    return undrain.Undrainer(scheduler, store, manual_clock, rules.get, validator=scheduler if validator else None)


def _ops(scheduler: FakeValidator) -> list[str]:
    return [m["operation"] for m in scheduler.mutations if m["operation"] != "drain_node" or m.get("reason")]


async def _events(store: audit.AuditStore, node: str = "node2") -> list[str]:
    return [t.event.value for t in await store.node_transitions(node)]


async def _state(store: audit.AuditStore, node: str = "node2") -> lifecycle.Transition:
    state = await store.node_state(node)
    assert state is not None
    return state


async def _steps(store: audit.AuditStore) -> dict[str, actions.ActionRecord]:
    return {r.step: r for r in await store.actions_for(conftest.WORKLOAD, 0, 1)}


async def _start(make_executor: executor.Executor, store: audit.AuditStore, advise: AdviceFactory,
                 manual_clock: clock.ManualClock, scheduler: FakeValidator) -> tuple[undrain.Undrainer, str]:
    """Our drain, its time passed, one sweep: reserved, resumed inside the reservation, the check submitted."""
    await _drain(make_executor, store, advise, manual_clock)
    sweeper = _sweeper(scheduler, store, manual_clock, {"default": VALIDATING})
    manual_clock.advance(HOUR - 1)
    assert await sweeper.sweep() == []
    manual_clock.advance(2)
    [row] = await sweeper.sweep()
    assert (row.step, row.status, row.operation) == ("validate_submit:node2#1", actions.ActionStatus.DONE,
                                                     actions.Operation.SUBMIT_CHECK)
    assert scheduler.reservations == {"node2"} and not scheduler.nodes["node2"].drained
    assert (await _state(store)).state is lifecycle.NodeState.VALIDATING
    return sweeper, str(row.args["job_id"])


async def test_a_passing_check_returns_the_node_and_deletes_our_reservation(
    make_executor: executor.Executor, store: audit.AuditStore, advise: AdviceFactory,
    manual_clock: clock.ManualClock, scheduler: FakeValidator,
) -> None:
    sweeper, job = await _start(make_executor, store, advise, manual_clock, scheduler)
    manual_clock.advance(60)
    assert await sweeper.sweep() == []  # the check runs: nothing to do but wait
    scheduler.end(job, checks.CheckPhase.PASSED, code=0, state="COMPLETED", tail="all GPUs pass\n")
    [row] = await sweeper.sweep()
    assert (row.step, row.status, row.args["validated"]) == ("resume_node:node2", actions.ActionStatus.DONE, True)
    assert scheduler.reservations == set() and not scheduler.nodes["node2"].drained
    assert _ops(scheduler) == ["drain_node", "reserve_node", "resume_node", "submit_check", "unreserve_node"]
    assert await _events(store) == ["taken-out", "validation-started", "validation-passed", "resumed"]
    assert (await _state(store)).state is lifecycle.NodeState.IN_SERVICE
    steps = await _steps(store)
    assert steps["validate_verdict:node2#1"].args["verdict"] == "passed"
    assert all(r.status is not actions.ActionStatus.INTENT for r in steps.values())
    manual_clock.advance(10 * HOUR)
    assert await sweeper.sweep() == []  # settled: once per drain


async def test_a_failing_check_holds_the_node_for_repair_with_its_evidence(
    make_executor: executor.Executor, store: audit.AuditStore, advise: AdviceFactory,
    manual_clock: clock.ManualClock, scheduler: FakeValidator,
) -> None:
    sweeper, job = await _start(make_executor, store, advise, manual_clock, scheduler)
    scheduler.end(job, checks.CheckPhase.FAILED, code=3, state="FAILED", tail="GPU 5: ECC DBE count 2\n")
    row = (await sweeper.sweep())[-1]
    assert (row.step, row.status) == ("validate_unreserve:node2#1", actions.ActionStatus.DONE)
    node = scheduler.nodes["node2"]
    assert node.drained and node.reason.startswith("trainguard: failed validation (exit 3)")
    assert scheduler.reservations == set()
    state = await _state(store)
    assert (state.state, state.event) == (lifecycle.NodeState.HELD_FOR_REPAIR, lifecycle.NodeEvent.VALIDATION_FAILED)
    assert state.evidence["exit_code"] == 3 and "ECC DBE" in state.evidence["output_tail"]
    manual_clock.advance(10 * HOUR)
    assert await sweeper.sweep() == []  # held: no rule of time returns it, no second check
    assert _ops(scheduler).count("submit_check") == 1

    await store.decide_node("node2", lifecycle.NodeEvent.CLEARED, by="alice", channel="cli",
                            at=manual_clock.now(), reason="GPU 5 replaced")
    [row] = await sweeper.sweep()  # a person's return: validated again before it goes back
    assert row.step == "validate_submit:node2#2"


async def test_no_verdict_in_time_cancels_the_check_and_drains_the_node_again(
    make_executor: executor.Executor, store: audit.AuditStore, advise: AdviceFactory,
    manual_clock: clock.ManualClock, scheduler: FakeValidator,
) -> None:
    sweeper, job = await _start(make_executor, store, advise, manual_clock, scheduler)
    manual_clock.advance(CHECK.timeout_s)
    await sweeper.sweep()
    assert scheduler.checks[job]["status"].state == "CANCELLED"
    node = scheduler.nodes["node2"]
    assert node.drained and node.reason.startswith("trainguard: validation inconclusive: no verdict within")
    assert scheduler.reservations == set()
    assert (await _state(store)).event is lifecycle.NodeEvent.VALIDATION_INCONCLUSIVE
    assert (await _state(store)).state is lifecycle.NodeState.OUT_OF_SERVICE
    manual_clock.advance(HOUR - 10)
    assert await sweeper.sweep() == []  # due again one undrainAfter after the new drain
    manual_clock.advance(20)
    [row] = await sweeper.sweep()
    assert row.step == "validate_submit:node2#2"


@pytest.mark.parametrize("ended", [checks.CheckPhase.NO_VERDICT, checks.CheckPhase.GONE])
async def test_a_check_without_a_verdict_is_inconclusive(
    make_executor: executor.Executor, store: audit.AuditStore, advise: AdviceFactory,
    manual_clock: clock.ManualClock, scheduler: FakeValidator, ended: checks.CheckPhase,
) -> None:
    sweeper, job = await _start(make_executor, store, advise, manual_clock, scheduler)
    if ended is checks.CheckPhase.GONE:
        del scheduler.checks[job]
    else:
        scheduler.end(job, ended, state="NODE_FAIL")
    await sweeper.sweep()
    verdict = (await _steps(store))["validate_verdict:node2#1"]
    assert verdict.args["verdict"] == "inconclusive" and "cancel_check" not in _ops(scheduler)
    assert scheduler.nodes["node2"].drained and scheduler.reservations == set()


async def test_a_node_that_vanished_is_inconclusive_and_our_reservation_still_goes(
    make_executor: executor.Executor, store: audit.AuditStore, advise: AdviceFactory,
    manual_clock: clock.ManualClock, scheduler: FakeValidator,
) -> None:
    sweeper, _ = await _start(make_executor, store, advise, manual_clock, scheduler)
    del scheduler.nodes["node2"]
    await sweeper.sweep()
    assert scheduler.reservations == set()
    assert (await _steps(store))["validate_verdict:node2#1"].args["vanished"] is True
    assert (await _state(store)).state is lifecycle.NodeState.OUT_OF_SERVICE


async def test_a_person_who_drains_the_node_during_validation_is_left_alone(
    make_executor: executor.Executor, store: audit.AuditStore, advise: AdviceFactory,
    manual_clock: clock.ManualClock, scheduler: FakeValidator,
) -> None:
    sweeper, job = await _start(make_executor, store, advise, manual_clock, scheduler)
    scheduler.nodes["node2"] = scheduler.nodes["node2"].model_copy(
        update={"drained": True, "state": "DRAIN", "reason": "bad fan, ticket 7"})
    await sweeper.sweep()
    assert scheduler.nodes["node2"].reason == "bad fan, ticket 7"  # their drain, untouched
    assert scheduler.reservations == set() and scheduler.checks[job]["status"].state == "CANCELLED"
    assert (await _state(store)).state is lifecycle.NodeState.OTHER
    steps = await _steps(store)
    assert steps["resume_node:node2"].status is actions.ActionStatus.SKIPPED
    assert "validate_drain:node2#1" not in steps
    manual_clock.advance(10 * HOUR)
    assert await sweeper.sweep() == []


async def test_a_person_who_holds_the_node_during_validation_keeps_it_out(
    make_executor: executor.Executor, store: audit.AuditStore, advise: AdviceFactory,
    manual_clock: clock.ManualClock, scheduler: FakeValidator,
) -> None:
    sweeper, _ = await _start(make_executor, store, advise, manual_clock, scheduler)
    manual_clock.advance(5)
    await store.decide_node("node2", lifecycle.NodeEvent.HELD, by="bob", channel="cli", at=manual_clock.now(),
                            reason="vendor asked for it")
    await sweeper.sweep()
    assert scheduler.nodes["node2"].drained and scheduler.reservations == set()
    assert (await _steps(store))["validate_verdict:node2#1"].args["verdict"] == "abandoned"
    assert (await _state(store)).state is lifecycle.NodeState.HELD_FOR_REPAIR


async def test_a_restart_at_any_step_goes_on_without_repeating_one(
    make_executor: executor.Executor, store: audit.AuditStore, advise: AdviceFactory,
    manual_clock: clock.ManualClock, scheduler: FakeValidator,
) -> None:
    await _drain(make_executor, store, advise, manual_clock)
    manual_clock.advance(HOUR + 1)
    for operation in ("reserve_node", "submit_check", "unreserve_node"):
        scheduler.crash_after.add(operation)
    first = _sweeper(scheduler, store, manual_clock, {"default": VALIDATING})
    assert await first.sweep() == []  # reserved, then the answer was lost: the intent stays
    assert (await _steps(store))["validate_reserve:node2#1"].status is actions.ActionStatus.INTENT
    second = _sweeper(scheduler, store, manual_clock, {"default": VALIDATING})  # a new process, the same store
    assert await second.sweep() == []  # reserve found ours; resumed inside it; the submit ran, its answer lost
    third = _sweeper(scheduler, store, manual_clock, {"default": VALIDATING})
    [row] = await third.sweep()  # the submitted check is found by its round's name, not submitted again
    job = str(row.args["job_id"])
    scheduler.end(job, checks.CheckPhase.FAILED, code=1, state="FAILED", tail="nvlink down")
    assert await _sweeper(scheduler, store, manual_clock, {"default": VALIDATING}).sweep() == []  # unreserve lost
    assert scheduler.reservations == set()
    await _sweeper(scheduler, store, manual_clock, {"default": VALIDATING}).sweep()
    assert _ops(scheduler) == ["drain_node", "reserve_node", "resume_node", "submit_check", "drain_node",
                               "unreserve_node"]
    assert all(r.status is not actions.ActionStatus.INTENT for r in (await _steps(store)).values())
    assert (await _state(store)).state is lifecycle.NodeState.HELD_FOR_REPAIR


async def test_monitor_mode_records_would_validate_and_changes_nothing(
    make_executor: executor.Executor, store: audit.AuditStore, advise: AdviceFactory,
    manual_clock: clock.ManualClock, scheduler: FakeValidator,
) -> None:
    await _drain(make_executor, store, advise, manual_clock)
    rules = {"default": undrain.UndrainRule(after_s=HOUR, mode=vocab.Mode.MONITOR, validation=CHECK)}
    sweeper = _sweeper(scheduler, store, manual_clock, rules)
    manual_clock.advance(2 * HOUR)
    [row] = await sweeper.sweep()
    assert (row.step, row.status) == ("would_validate_node:node2", actions.ActionStatus.SKIPPED)
    assert row.error.startswith("Monitor mode: would validate (/opt/site/check.sh) and then resume node2")
    assert await sweeper.sweep() == []
    assert _ops(scheduler) == ["drain_node"] and scheduler.nodes["node2"].drained


async def test_a_round_under_way_waits_while_actions_are_off(
    make_executor: executor.Executor, store: audit.AuditStore, advise: AdviceFactory,
    manual_clock: clock.ManualClock, scheduler: FakeValidator,
) -> None:
    sweeper, job = await _start(make_executor, store, advise, manual_clock, scheduler)
    rules = {"default": undrain.UndrainRule(after_s=HOUR, mode=vocab.Mode.MONITOR, validation=CHECK)}
    paused = _sweeper(scheduler, store, manual_clock, rules)
    scheduler.end(job, checks.CheckPhase.PASSED, code=0, state="COMPLETED")
    assert await paused.sweep() == []
    assert scheduler.reservations == {"node2"}
    [row] = await sweeper.sweep()  # actions on again: the round goes on
    assert row.step == "resume_node:node2" and scheduler.reservations == set()


async def test_a_scheduler_without_validation_returns_by_time_and_says_so(
    make_executor: executor.Executor, store: audit.AuditStore, advise: AdviceFactory,
    manual_clock: clock.ManualClock, scheduler: FakeValidator,
) -> None:
    await _drain(make_executor, store, advise, manual_clock)
    sweeper = _sweeper(scheduler, store, manual_clock, {"default": VALIDATING}, validator=False)
    manual_clock.advance(2 * HOUR)
    [row] = await sweeper.sweep()
    assert (row.step, row.status) == ("resume_node:node2", actions.ActionStatus.DONE)
    assert row.args["validation"] == "unsupported by fake: returned by the time rule alone"
    assert _ops(scheduler) == ["drain_node", "resume_node"]


async def test_a_persons_undo_is_refused_while_a_round_is_under_way(
    make_executor: executor.Executor, store: audit.AuditStore, advise: AdviceFactory,
    manual_clock: clock.ManualClock, scheduler: FakeValidator,
) -> None:
    sweeper, _ = await _start(make_executor, store, advise, manual_clock, scheduler)
    with pytest.raises(undrain.NotOurs, match="validation of node2 is under way"):
        await sweeper.undo("node2", by="carol")
    assert scheduler.reservations == {"node2"} and RESUME_STEP_NODE2 not in await _steps(store)


RESUME_STEP_NODE2 = undrain.RESUME_STEP + "node2"


async def test_our_drain_again_after_an_inconclusive_check_is_no_new_incident(
    make_executor: executor.Executor, store: audit.AuditStore, advise: AdviceFactory,
    manual_clock: clock.ManualClock, scheduler: FakeValidator,
) -> None:
    rule = dataclasses.replace(VALIDATING, lemon_window_s=24 * HOUR)
    sweeper = _sweeper(scheduler, store, manual_clock, {"default": rule})
    await _drain(make_executor, store, advise, manual_clock)
    manual_clock.advance(HOUR + 1)
    [row] = await sweeper.sweep()
    scheduler.end(str(row.args["job_id"]), checks.CheckPhase.PASSED, code=0, state="COMPLETED")
    await sweeper.sweep()
    assert (await _state(store)).state is lifecycle.NodeState.IN_SERVICE
    manual_clock.advance(HOUR)
    item = advise(vocab.AdviceAction.STOP, drain_nodes=["node2"], generation=2,  # out again within the window
                  deadline=manual_clock.now() + 300)
    await store.record_advice(item, at=manual_clock.now())
    assert await make_executor.reconcile(item) is vocab.Disposition.CONVERGED
    await sweeper.sweep()
    assert (await _state(store)).event is lifecycle.NodeEvent.REPEAT_OFFENDER
    await store.decide_node("node2", lifecycle.NodeEvent.CLEARED, by="alice", channel="cli", at=manual_clock.now(),
                            reason="checked by hand")
    await sweeper.sweep()  # the person's return: validated first
    manual_clock.advance(CHECK.timeout_s)
    await sweeper.sweep()  # no verdict in time: drained again, out of service
    assert (await _state(store)).state is lifecycle.NodeState.OUT_OF_SERVICE
    manual_clock.advance(HOUR + 1)
    [row] = await sweeper.sweep()  # due again by time, not held as a repeat offender
    assert row.step == "validate_submit:node2#2"
