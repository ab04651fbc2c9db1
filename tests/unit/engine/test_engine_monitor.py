"""Engine in Monitor mode: the full trail is recorded, the scheduler is only read.

Also the switches that lead to Monitor mode or out of it: the cluster-wide ``allow_action``,
a policy swap (``update_policies``) and a per-workload ``set_mode_override``.
"""

from __future__ import annotations

from tests.support import fake_scheduler
from tests.unit.engine import scenario
from trainguard.model import vocab
from trainguard.policy import loader


async def assert_monitored_hardware_trail(h: scenario.Harness, job_id: str) -> None:
    """anomaly -> verdict -> advice (Monitor) -> skipped step rows -> Monitored outcome; no change."""
    assert await h.kinds(job_id) == ["anomaly", "verdict", "advice", "action", "action", "action", "outcome"]
    [anomaly] = await h.records(job_id, vocab.AuditKind.ANOMALY)
    assert anomaly.payload["category"] == "gpu_fallen_off_bus"
    assert anomaly.payload["suspect_nodes"] == ["node2"]
    [verdict] = await h.records(job_id, vocab.AuditKind.VERDICT)
    assert (verdict.payload["attribution"], verdict.payload["nodes"]) == ("hardware", ["node2"])
    [advice] = await h.advice(job_id)
    assert (advice["mode"], advice["action"], advice["exclusions"]) == ("Monitor", "requeue", ["node2"])
    assert "Monitor mode: recorded, not carried out" in advice["reasons"]
    steps = [r.payload for r in await h.records(job_id, vocab.AuditKind.ACTION)]
    assert [(s["step"], s["status"]) for s in steps] == [
        ("requeue_hold", "skipped"), ("exclude_nodes", "skipped"), ("release", "skipped")]
    [outcome] = await h.outcomes(job_id)
    assert outcome["disposition"] == vocab.Disposition.MONITORED.value
    assert h.runtime(job_id).disposition is vocab.Disposition.MONITORED
    assert h.scheduler.mutating_calls() == []
    assert all(call[0] in fake_scheduler.READS for call in h.scheduler.calls)


async def test_monitor_policy_records_the_whole_trail_and_changes_nothing(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness()
    h.submit("10", "trainguard")  # the default policy, Monitor
    h.write("10", *scenario.ranked(0, "iteration 1 loss 2.3"), *scenario.ranked(1, scenario.XID_79))

    await h.step()
    assert await h.records("10") == []  # the settle window is still open
    await h.settle()

    await assert_monitored_hardware_trail(h, "10")
    job = h.scheduler.jobs["10"]
    assert (job.attempt, job.state.value, job.held, job.excluded_nodes) == (0, "RUNNING", False, [])


async def test_cluster_switch_off_forces_monitor_over_an_action_policy(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness(allow_action=False)
    h.submit("11", "trainguard policy=act")
    h.write("11", *scenario.ranked(1, scenario.XID_79))

    await h.step()
    await h.settle()

    spec = h.runtime("11").spec
    assert spec is not None and spec.mode is vocab.Mode.MONITOR
    await assert_monitored_hardware_trail(h, "11")


async def test_update_policies_switches_a_tracked_workload_to_action(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness()
    h.submit("12", "trainguard")  # default: Monitor
    await h.step()
    assert h.runtime("12").spec is not None
    engine_before = h.engine

    h.engine.update_policies(loader.parse_text(scenario.POLICIES.replace("mode: Monitor", "mode: Action"), "swapped"))
    h.write("12", *scenario.ranked(1, scenario.XID_79))
    await h.step()
    await h.settle()

    assert h.engine is engine_before
    [advice] = await h.advice("12")
    assert (advice["mode"], advice["action"], advice["exclusions"]) == ("Action", "requeue", ["node2"])
    assert h.mutations("12") == ["requeue_hold", "exclude_nodes", "release"]


async def test_set_mode_override_forces_monitor_and_removing_it_restores_action(
    make_harness: scenario.MakeHarness,
) -> None:
    h = await make_harness()
    h.submit("13", "trainguard policy=act")
    h.submit("14", "trainguard policy=act")
    await h.step()

    h.engine.set_mode_override(scenario.workload_of("13"), vocab.Mode.MONITOR)
    h.engine.set_mode_override(scenario.workload_of("14"), vocab.Mode.MONITOR)
    h.engine.set_mode_override(scenario.workload_of("14"), None)
    for job_id in ("13", "14"):
        h.write(job_id, *scenario.ranked(1, scenario.XID_79))
    await h.step()
    await h.settle()

    [monitored] = await h.advice("13")
    assert monitored["mode"] == "Monitor"
    assert h.mutations("13") == []
    [acted] = await h.advice("14")
    assert acted["mode"] == "Action"
    assert h.mutations("14") == ["requeue_hold", "exclude_nodes", "release"]


async def test_a_mode_override_given_before_the_job_is_seen_applies_when_it_is_tracked(
    make_harness: scenario.MakeHarness,
) -> None:
    h = await make_harness()
    h.engine.set_mode_override(scenario.workload_of("15"), vocab.Mode.MONITOR)
    h.submit("15", "trainguard policy=act")
    h.write("15", *scenario.ranked(1, scenario.XID_79))

    await h.step()
    await h.settle()

    [advice] = await h.advice("15")
    assert advice["mode"] == "Monitor"
    assert h.scheduler.mutating_calls() == []
