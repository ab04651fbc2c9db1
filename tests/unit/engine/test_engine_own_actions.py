"""Engine: the kill lines our own requeue causes are recorded as its effect, never as a new anomaly.

A hung job is requeued while its tasks still run; Slurm then prints the teardown (step cancelled
due to the requeue, tasks terminated) into the attempt's output. In Action mode that is our doing:
one ``action`` record with status ``effect``, no anomaly, no verdict, no second advice. In Monitor
mode nothing was done by us, so the same lines stay an anomaly. (On real Slurm:
tests/e2e/adversarial/test_own_actions.py.)
"""

from __future__ import annotations

from tests.unit.engine import scenario
from trainguard.model import vocab

TEARDOWN = (
    "slurmstepd: error: *** STEP 30.0 ON node1 CANCELLED AT 2027-01-15T08:00:02 DUE TO JOB REQUEUE ***",
    "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
    "srun: error: node2: task 1: Terminated",
)


async def _hang_then_teardown(h: scenario.Harness, job_id: str, comment: str) -> None:
    h.submit(job_id, comment)
    h.write(job_id, *scenario.ranked(0, "iteration 1 loss 2.3"), *scenario.ranked(1, "iteration 1 loss 2.3"))
    await h.step()
    await h.step(61.0)  # past the 60 s hang timeout: a hang, advised (and in Action mode requeued)
    await h.recoveries()
    h.write(job_id, *TEARDOWN)
    await h.step()
    await h.settle()


async def test_teardown_after_our_requeue_is_its_effect(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness()
    await _hang_then_teardown(h, "30", "trainguard policy=act")

    assert h.mutations("30") == ["requeue"]
    anomalies = await h.records("30", vocab.AuditKind.ANOMALY)
    assert [(a.attempt, a.payload["symptom"]) for a in anomalies] == [(0, "hang")]
    assert len(await h.records("30", vocab.AuditKind.VERDICT)) == 1
    assert [a["action"] for a in await h.advice("30")] == ["requeue"]
    effects = [r for r in await h.records("30", vocab.AuditKind.ACTION) if r.payload["status"] == "effect"]
    assert [(e.attempt, e.payload["operation"], e.payload["generation"]) for e in effects] == [(0, "requeue", 1)]
    assert effects[0].payload["effect"]["category"] == "process_signal_killed"
    assert effects[0].payload["effect"]["evidence"][0]["text"] in TEARDOWN


async def test_in_monitor_mode_the_same_lines_stay_an_anomaly(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness()
    await _hang_then_teardown(h, "31", "trainguard")  # the Monitor policy: nothing was done by us

    assert h.mutations("31") == []
    anomalies = await h.records("31", vocab.AuditKind.ANOMALY)
    assert [a.payload["category"] for a in anomalies] == ["progress_stalled", "process_signal_killed"]
    assert not [r for r in await h.records("31", vocab.AuditKind.ACTION) if r.payload["status"] == "effect"]
