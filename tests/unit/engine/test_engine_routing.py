"""Engine: routing a job to its policy (recorded with the advice), exit-code rules, and the sweep
resuming the nodes we drained (``exclusion.undrainAfter``), Action and Monitor."""

from __future__ import annotations

from tests.unit.engine import scenario
from trainguard.act import executor as executor_mod
from trainguard.model import actions, advice, vocab

ROUTED = """
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: debug-partition}
spec:
  mode: Action
  selector: {partitions: [debug]}
  retries: {maxAttemptsWithoutCheckpoint: 10, backoff: {initialSeconds: 0}}
  detection: {settle: 1s}
  rules:
    - match: {exitCodes: [42]}
      action: Stop
---
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: ml}
spec:
  mode: Monitor
  selector: {partitions: [debug], accounts: [ml]}
  detection: {settle: 1s}
---
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: named-only}
spec:
  mode: Action
  exclusion: {undrainAfter: 1h}
  blastRadius: {maxDrainedShare: 0.5}
"""


async def test_a_job_that_says_just_trainguard_is_routed_by_partition_and_the_route_is_recorded(
    make_harness: scenario.MakeHarness,
) -> None:
    h = await make_harness(ROUTED)
    h.submit("1", "trainguard", partition="debug")
    h.write("1", *scenario.ranked(1, scenario.XID_79))

    await h.step()
    await h.settle()

    record = await h.store.get_workload(scenario.workload_of("1"))
    assert record is not None and (record.policy, record.opt_in_errors) == ("debug-partition", [])
    [item] = await h.advice("1")
    assert (item["policy"], item["mode"], item["action"]) == ("debug-partition", "Action", "requeue")
    route = item["route"]
    assert route["policy"] == "debug-partition" and route["explicit"] is False
    assert route["reason"] == "most specific selector covering the job (partition 'debug'; specificity 1)"
    assert route["candidates"] == [{"policy": "debug-partition", "specificity": 1, "priority": 0}]
    assert h.mutations("1") == ["requeue_hold", "exclude_nodes", "release"]


async def test_the_more_specific_selector_wins_and_a_job_outside_every_selector_is_not_covered(
    make_harness: scenario.MakeHarness,
) -> None:
    h = await make_harness(ROUTED)
    h.submit("2", "trainguard", partition="debug", account="ml")
    h.submit("3", "trainguard", partition="gpu")
    for job_id in ("2", "3"):
        h.write(job_id, *scenario.ranked(1, scenario.XID_79))

    await h.step()
    await h.settle()

    [item] = await h.advice("2")
    assert (item["policy"], item["mode"]) == ("ml", "Monitor")
    assert [c["policy"] for c in item["route"]["candidates"]] == ["ml", "debug-partition"]
    assert h.mutations("2") == []
    record = await h.store.get_workload(scenario.workload_of("3"))
    assert record is not None and record.policy == ""
    assert record.opt_in_errors == ["no policy's selector covers the job (partition 'gpu') and no policy is named "
                                    "'default'"]
    assert await h.records("3") == []


async def test_a_named_policy_whose_selector_excludes_the_job_is_refused_with_the_reason(
    make_harness: scenario.MakeHarness,
) -> None:
    h = await make_harness(ROUTED)
    h.submit("4", "trainguard policy=ml", partition="debug", account="physics")
    h.write("4", *scenario.ranked(1, scenario.XID_79))
    await h.step()
    await h.settle()
    record = await h.store.get_workload(scenario.workload_of("4"))
    assert record is not None and record.policy == "ml"
    assert record.opt_in_errors == ["the job names policy 'ml', but that policy's selector does not cover account "
                                    "'physics'"]
    assert await h.records("4") == [] and h.mutations("4") == []


async def test_an_exit_code_rule_stops_the_job_instead_of_requeueing_it(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness(ROUTED)
    h.submit("5", "trainguard", partition="debug")
    await h.step()
    h.fail("5", exit_code=42)
    await h.step()
    await h.settle()

    [item] = await h.advice("5")
    assert item["action"] == "stop"
    assert item["reasons"][0].startswith("rule 0 (exitCodes 42) matched crash")
    assert "requeue" not in h.mutations("5") and "requeue_hold" not in h.mutations("5")
    assert h.scheduler.jobs["5"].attempt == 0


async def _our_drain(h: scenario.Harness, node: str) -> None:
    """A drain carried out for a workload under the policy ``named-only`` by an executor with both keys on
    (an earlier run of ours; the engine under test may run with the switch off)."""
    h.submit("9", "trainguard policy=named-only")
    await h.step()
    item = advice.Advice(workload=scenario.workload_of("9"), attempt=0, generation=1, action=vocab.AdviceAction.STOP,
                         drain_nodes=[node], mode=vocab.Mode.ACTION, deadline=h.clock.now() + 300,
                         policy="named-only")
    await h.store.record_advice(item, at=h.clock.now())
    earlier_run = executor_mod.Executor(h.scheduler, h.store, h.clock)
    assert await earlier_run.reconcile(item) is vocab.Disposition.CONVERGED
    assert h.scheduler.nodes[node].drained


async def test_the_sweep_resumes_our_drained_node_after_undrain_after_never_a_persons(
    make_harness: scenario.MakeHarness,
) -> None:
    h = await make_harness(ROUTED)
    h.scheduler.nodes["node3"] = h.scheduler.nodes["node3"].model_copy(
        update={"drained": True, "state": "IDLE+DRAIN", "reason": "maintenance"})
    await _our_drain(h, "node5")

    h.clock.advance(3599)
    await h.engine.sweep()
    assert h.scheduler.nodes["node5"].drained
    h.clock.advance(2)
    await h.engine.sweep()

    assert not h.scheduler.nodes["node5"].drained
    assert h.scheduler.nodes["node3"].drained and h.scheduler.nodes["node3"].reason == "maintenance"
    rows = await h.store.actions_by_operation([actions.Operation.RESUME_NODE])
    assert [(r.step, r.status) for r in rows] == [("resume_node:node5", actions.ActionStatus.DONE)]


async def test_with_the_cluster_wide_switch_off_the_sweep_records_would_resume(
    make_harness: scenario.MakeHarness,
) -> None:
    h = await make_harness(ROUTED, allow_action=False)
    await _our_drain(h, "node5")  # drained by an Action advice of an earlier run, with the switch on
    h.clock.advance(2 * 3600)
    await h.engine.sweep()
    assert h.scheduler.nodes["node5"].drained
    rows = await h.store.actions_by_operation([actions.Operation.RESUME_NODE])
    assert [(r.step, r.status) for r in rows] == [("would_resume_node:node5", actions.ActionStatus.SKIPPED)]
