"""Per-workload policy overrides set by a shell (WorkloadRecovery ``spec.overrides``): honoured by the
engine on top of the job comment's overrides, with the same rules (budgets can only be lowered)."""

from __future__ import annotations

from tests.unit.engine import scenario


async def test_a_max_retries_override_of_zero_stops_instead_of_requeueing(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness()
    h.engine.set_workload_overrides(scenario.workload_of("21"), {"max-retries": 0})
    h.submit("21", "trainguard policy=act")
    h.submit("22", "trainguard policy=act")
    await h.step()
    spec = h.runtime("21").spec
    assert spec is not None and spec.retries.max_retries == 0
    for job_id in ("21", "22"):
        h.write(job_id, *scenario.ranked(1, scenario.XID_79))
    await h.step()
    await h.settle()

    [stopped] = await h.advice("21")
    assert stopped["action"] == "stop"
    assert h.mutations("21") == ["cancel"]
    [requeued] = await h.advice("22")
    assert requeued["action"] == "requeue"


async def test_overrides_change_a_tracked_workload_and_cannot_raise_a_budget(
    make_harness: scenario.MakeHarness,
) -> None:
    h = await make_harness()
    h.submit("23", "trainguard policy=act")
    await h.step()
    workload = scenario.workload_of("23")

    h.engine.set_workload_overrides(workload, {"max-excluded-nodes": 0, "hang-timeout": 90.0,
                                               "max-attempts-without-checkpoint": 4, "max-retries": 50})
    rt = h.runtime("23")
    assert rt.spec is not None
    assert (rt.spec.exclusion.max_excluded_nodes_per_job, rt.spec.detection.hang_timeout,
            rt.spec.retries.max_attempts_without_checkpoint, rt.spec.retries.max_retries) == (0, 90.0, 4, 3)
    assert any("max-retries=50 is above the policy's maxRetries (3)" in e for e in rt.opt_in_errors)

    h.write("23", *scenario.ranked(1, scenario.XID_79))
    await h.step()
    await h.settle()
    [advice] = await h.advice("23")
    assert (advice["action"], advice["exclusions"]) == ("requeue", [])  # no exclusion allowed any more

    h.engine.set_workload_overrides(workload, {})
    assert h.runtime("23").spec is not None and h.runtime("23").spec.exclusion.max_excluded_nodes_per_job == 2
