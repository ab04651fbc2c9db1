"""Engine in Action mode: from a printed line to a verified change in the scheduler.

Hardware -> requeue-hold, exclude the node, release; application -> plain requeue; out of
retries -> cancel; exit code 93 -> stop (or nothing once it cannot be requeued). And one advice
per attempt, unless stronger evidence arrives.
"""

from __future__ import annotations

from tests.unit.engine import scenario
from trainguard.model import actions, vocab, workloads


async def test_hardware_crash_requeues_without_the_node_and_records_every_step(
    make_harness: scenario.MakeHarness,
) -> None:
    h = await make_harness()
    h.submit("20")
    h.write("20", *scenario.ranked(0, "iteration 1 loss 2.3"), *scenario.ranked(1, "iteration 1 loss 2.3"))
    await h.step()
    h.write("20", *scenario.ranked(1, scenario.XID_79))

    await h.step()
    await h.settle()

    assert h.mutations("20") == ["requeue_hold", "exclude_nodes", "release"]
    job = h.scheduler.jobs["20"]
    assert (job.attempt, job.state, job.held, job.excluded_nodes) == (1, workloads.JobState.PENDING, False, ["node2"])
    assert await h.kinds("20") == ["anomaly", "verdict", "advice", *["action"] * 6, "outcome"]
    [anomaly] = await h.records("20", vocab.AuditKind.ANOMALY)
    assert anomaly.attempt == 0
    assert anomaly.payload["category"] == "gpu_fallen_off_bus"
    assert any(e["text"] == f"1: {scenario.XID_79}" for e in anomaly.payload["evidence"])
    [verdict] = await h.records("20", vocab.AuditKind.VERDICT)
    assert (verdict.payload["attribution"], verdict.payload["nodes"]) == ("hardware", ["node2"])
    [advice] = await h.advice("20")
    assert (advice["mode"], advice["action"], advice["exclusions"], advice["generation"]) == (
        "Action", "requeue", ["node2"], 1)
    steps = [r.payload for r in await h.records("20", vocab.AuditKind.ACTION)]
    assert [(s["step"], s["status"]) for s in steps] == [
        ("requeue_hold", "intent"), ("requeue_hold", "done"), ("exclude_nodes", "intent"), ("exclude_nodes", "done"),
        ("release", "intent"), ("release", "done")]
    assert steps[2]["arguments"] == {"job_id": "20", "excluded_nodes": ["node2"], "added_nodes": ["node2"]}
    [outcome] = await h.outcomes("20")
    assert outcome["disposition"] == vocab.Disposition.CONVERGED.value
    rt = h.runtime("20")
    assert rt.disposition is vocab.Disposition.CONVERGED
    assert [r["kind"] for r in rt.recent] == ["anomaly", "verdict", "advice", "outcome"]
    assert await h.store.pending_advice() == []


async def test_a_host_bearing_line_names_the_node_without_a_rank_map(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness()
    h.submit("21", nodes=("node3", "node4"))
    h.write("21", f"Nov 29 12:00:01 node4 kernel: {scenario.XID_79}")

    await h.step()
    await h.settle()

    [advice] = await h.advice("21")
    assert advice["exclusions"] == ["node4"]
    assert h.scheduler.jobs["21"].excluded_nodes == ["node4"]


async def test_application_crash_requeues_without_exclusion(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness()
    h.submit("22")
    h.write("22", *scenario.ranked(0, "iteration 1 loss 2.3"), *scenario.ranked(1, *scenario.TRACEBACK))
    await h.step()
    h.fail("22")

    await h.step()
    await h.recoveries()

    [verdict] = await h.records("22", vocab.AuditKind.VERDICT)
    assert verdict.payload["attribution"] == "application"
    [advice] = await h.advice("22")
    assert (advice["action"], advice["exclusions"]) == ("requeue", [])
    assert h.mutations("22") == ["requeue"]
    job = h.scheduler.jobs["22"]
    assert (job.attempt, job.state, job.excluded_nodes) == (1, workloads.JobState.PENDING, [])
    [outcome] = await h.outcomes("22")
    assert outcome["disposition"] == "Converged"


async def test_retries_exhausted_stops_the_job(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness()
    h.submit("23", "trainguard policy=act max-retries=1")
    h.write("23", *scenario.ranked(1, *scenario.TRACEBACK))
    await h.step()
    await h.settle()
    assert h.mutations("23") == ["requeue"]  # attempt 0: retry 1 of 1

    h.scheduler.start("23", ["node1", "node2"])
    await h.step()
    h.write("23", *scenario.ranked(1, *scenario.TRACEBACK))
    await h.step()
    await h.settle()

    assert h.mutations("23") == ["requeue", "cancel"]
    assert h.scheduler.jobs["23"].state is workloads.JobState.CANCELLED
    advice = await h.advice("23")
    assert [(a["attempt"], a["action"]) for a in advice] == [(0, "requeue"), (1, "stop")]
    assert any("retries exhausted (1 of maxRetries 1)" in reason for reason in advice[1]["reasons"])
    assert [o["disposition"] for o in await h.outcomes("23")] == ["Converged", "Converged"]


async def test_exit_code_93_stops_a_job_that_asks_not_to_be_requeued(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness()
    h.submit("24")
    h.write("24", *scenario.ranked(0, "iteration 1 loss 2.3"))
    await h.step()
    h.fail("24", exit_code=93)

    await h.step()
    await h.recoveries()

    [advice] = await h.advice("24")
    assert advice["action"] == "stop"
    assert any("exit code 93" in reason for reason in advice["reasons"])
    # the job has ended already: stop is satisfied without touching it, and it is never requeued
    assert h.scheduler.mutating_calls() == []
    [outcome] = await h.outcomes("24")
    assert (outcome["disposition"], outcome["detail"]) == ("Converged", "already satisfied")


async def test_exit_code_93_of_a_job_that_cannot_be_requeued_needs_nothing(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness()
    h.submit("25", requeue_allowed=False)
    await h.step()
    h.fail("25", exit_code=93)

    await h.step()
    await h.recoveries()

    [advice] = await h.advice("25")
    assert advice["action"] == "none"
    assert any("exit code 93" in reason for reason in advice["reasons"])
    assert h.runtime("25").disposition is vocab.Disposition.CONVERGED
    assert await h.records("25", vocab.AuditKind.ACTION) == []
    assert h.scheduler.mutating_calls() == []


async def test_more_evidence_of_the_same_strength_gives_no_second_advice(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness()
    h.submit("26", "trainguard")  # Monitor: the job stays where it is while evidence keeps coming
    h.write("26", *scenario.ranked(1, *scenario.TRACEBACK))
    await h.step()
    await h.settle()
    assert len(await h.advice("26")) == 1

    h.write("26", *scenario.ranked(0, *scenario.TRACEBACK))
    h.write("26", *scenario.ranked(1, "RuntimeError: CUDA error: an illegal memory access was encountered"))
    await h.step()
    await h.settle()
    h.fail("26")
    await h.step()
    await h.settle()

    [advice] = await h.advice("26")
    assert (advice["generation"], advice["action"]) == (1, "requeue")
    assert len(await h.records("26", vocab.AuditKind.ANOMALY)) == 1


async def test_a_second_anomaly_with_weaker_attribution_is_recorded_as_evidence_only(
    make_harness: scenario.MakeHarness,
) -> None:
    """The engine's own gate: the detector does report a more specific first cause (a Python
    exception after Slurm's preemption line) but its attribution (application) is weaker than the
    advised one (system), so no second generation."""
    h = await make_harness()
    h.submit("27", "trainguard")
    h.write("27", "slurmstepd: error: *** JOB 27 ON node1 CANCELLED AT 2026-11-29T16:20:01 DUE TO PREEMPTION ***")
    await h.step()
    await h.settle()
    [first] = await h.records("27", vocab.AuditKind.VERDICT)
    assert first.payload["attribution"] == "system"

    h.write("27", *scenario.ranked(1, *scenario.TRACEBACK))
    await h.step()
    await h.settle()

    verdicts = [r.payload["attribution"] for r in await h.records("27", vocab.AuditKind.VERDICT)]
    assert verdicts == ["system", "application"]
    [advice] = await h.advice("27")
    assert advice["generation"] == 1


async def test_stronger_hardware_evidence_after_an_application_advice_gives_generation_2(
    make_harness: scenario.MakeHarness,
) -> None:
    h = await make_harness()
    h.submit("28", "trainguard")
    h.write("28", *scenario.ranked(0, *scenario.TRACEBACK))
    await h.step()
    await h.settle()

    h.write("28", *scenario.ranked(1, scenario.XID_79))
    await h.step()
    await h.settle()

    advice = await h.advice("28")
    assert [(a["attempt"], a["generation"], a["action"], a["exclusions"]) for a in advice] == [
        (0, 1, "requeue", []), (0, 2, "requeue", ["node2"])]
    verdicts = [r.payload["attribution"] for r in await h.records("28", vocab.AuditKind.VERDICT)]
    assert verdicts == ["application", "hardware"]


async def test_late_hardware_evidence_excludes_the_node_from_the_already_requeued_job(
    make_harness: scenario.MakeHarness,
) -> None:
    """Action mode: the application advice requeued the job; the Xid line that follows (read while
    the job is pending) adds generation 2, whose requeue is already in effect: only the exclusion runs."""
    h = await make_harness()
    h.submit("29")
    h.write("29", *scenario.ranked(0, *scenario.TRACEBACK))
    await h.step()
    await h.settle()
    assert h.mutations("29") == ["requeue"]

    h.write("29", *scenario.ranked(1, scenario.XID_79))
    await h.step()
    await h.settle()

    assert h.mutations("29") == ["requeue", "exclude_nodes"]
    job = h.scheduler.jobs["29"]
    assert (job.attempt, job.held, job.excluded_nodes) == (1, False, ["node2"])
    rows = {r.step: r.status for r in await h.store.actions_for(scenario.workload_of("29"), 0, 2)}
    assert rows == {"requeue_hold": actions.ActionStatus.SKIPPED, "exclude_nodes": actions.ActionStatus.DONE,
                    "release": actions.ActionStatus.SKIPPED}
    assert [o["disposition"] for o in await h.outcomes("29")] == ["Converged", "Converged"]
