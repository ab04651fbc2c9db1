"""Engine: the blast-radius limit counts one operation per carried-out advice generation."""

from __future__ import annotations

from tests.unit.engine import scenario
from trainguard.model import actions, vocab

LIMITED = """
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: act}
spec:
  mode: Action
  detection: {settle: 1s}
  blastRadius: {maxActionsPerHour: 2}
"""

JOBS = {"40": ("node1", "node2"), "41": ("node3", "node4"), "42": ("node5", "node6")}
"""Three jobs on separate nodes; rank 1 of each is on its second node."""


async def hardware_crash(h: scenario.Harness, job_id: str) -> None:
    h.write(job_id, *scenario.ranked(1, scenario.XID_79))
    await h.step()
    await h.settle()


async def test_two_hardware_recoveries_pass_and_the_third_is_blocked(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness(policies=LIMITED)
    for job_id, nodes in JOBS.items():
        h.submit(job_id, nodes=nodes)
    await h.step()

    await hardware_crash(h, "40")
    await hardware_crash(h, "41")
    await hardware_crash(h, "42")

    for job_id, nodes in (("40", "node2"), ("41", "node4")):
        assert h.mutations(job_id) == ["requeue_hold", "exclude_nodes", "release"]
        assert h.scheduler.jobs[job_id].excluded_nodes == [nodes]
        [outcome] = await h.outcomes(job_id)
        assert outcome["disposition"] == "Converged"
    assert h.mutations("42") == []
    job = h.scheduler.jobs["42"]
    assert (job.attempt, job.held, job.excluded_nodes) == (0, False, [])
    [outcome] = await h.outcomes("42")
    assert outcome["disposition"] == "Abandoned"
    assert "maxActionsPerHour 2" in outcome["detail"]
    assert "2 operations in the last hour + 1 planned" in outcome["detail"]
    rows = await h.store.actions_for(scenario.workload_of("42"), 0, 1)
    assert [r.step for r in rows] == ["requeue_hold", "exclude_nodes", "release"]
    assert all(r.status is actions.ActionStatus.SKIPPED and r.error.startswith("blocked: ") for r in rows)
    assert h.runtime("42").disposition is vocab.Disposition.ABANDONED


async def test_the_limit_is_a_rolling_hour(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness(policies=LIMITED)
    for job_id, nodes in JOBS.items():
        h.submit(job_id, nodes=nodes)
    await h.step()
    await hardware_crash(h, "40")
    await hardware_crash(h, "41")

    h.clock.advance(3600)
    await hardware_crash(h, "42")

    assert h.mutations("42") == ["requeue_hold", "exclude_nodes", "release"]
    [outcome] = await h.outcomes("42")
    assert outcome["disposition"] == "Converged"
