"""Engine edge cases found by reading the loop (each was a bug, fixed in the engine): first sight
while pending, the rank layout of several tasks per node, attempts seen only after they ended,
silence of a run that is no longer running, late policy coverage, a resumed advice's
blast-radius check, and a record-only straggler advice followed by a crash."""

from __future__ import annotations

from tests.unit.engine import scenario
from trainguard.model import advice as advice_mod
from trainguard.model import vocab, workloads
from trainguard.policy import loader

LATER = """
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: later}
spec:
  mode: Action
  retries: {maxRetries: 5, maxAttemptsWithoutCheckpoint: 2}
  detection: {settle: 1s}
"""


async def test_a_job_first_seen_pending_gets_its_nodes_once_it_runs(make_harness: scenario.MakeHarness) -> None:
    """Every job is pending before it runs: the rank -> node layout must come from the running job."""
    h = await make_harness()
    h.submit("70", state=workloads.JobState.PENDING)
    await h.step()
    h.scheduler.start("70", ["node1", "node2"])
    await h.step()

    h.write("70", *scenario.ranked(1, scenario.XID_79))
    await h.step()
    await h.settle()

    [advice] = await h.advice("70")
    assert advice["exclusions"] == ["node2"]
    assert h.scheduler.jobs["70"].excluded_nodes == ["node2"]


async def test_the_rank_layout_follows_the_jobs_task_count(make_harness: scenario.MakeHarness) -> None:
    """16 tasks on 2 nodes: ranks 8-15 run on the second node (Slurm's block distribution)."""
    h = await make_harness()
    h.submit("78", num_tasks=16)
    h.write("78", *scenario.ranked(9, scenario.XID_79))

    await h.step()
    await h.settle()

    [advice] = await h.advice("78")
    assert advice["exclusions"] == ["node2"]


async def test_an_uneven_layout_names_no_node_from_a_rank_alone(make_harness: scenario.MakeHarness) -> None:
    """3 tasks on 2 nodes: which node ran rank 1 is not known, so nothing is excluded on a guess."""
    h = await make_harness()
    h.submit("79", num_tasks=3)
    h.write("79", *scenario.ranked(1, scenario.XID_79))

    await h.step()
    await h.settle()

    [verdict] = await h.records("79", vocab.AuditKind.VERDICT)
    assert (verdict.payload["attribution"], verdict.payload["nodes"]) == ("hardware", [])
    [advice] = await h.advice("79")
    assert (advice["action"], advice["exclusions"]) == ("requeue", [])
    assert h.mutations("79") == ["requeue"]


async def test_an_attempt_first_seen_after_it_failed_is_still_handled(make_harness: scenario.MakeHarness) -> None:
    """The requeued run starts and fails between two discovery rounds (a slow poll, a fast failure)."""
    h = await make_harness()
    h.submit("71")
    h.write("71", *scenario.ranked(1, *scenario.TRACEBACK))
    await h.step()
    await h.settle()
    assert h.scheduler.jobs["71"].attempt == 1

    h.scheduler.start("71", ["node1", "node2"])
    h.write("71", *scenario.ranked(1, *scenario.TRACEBACK))
    h.fail("71")
    await h.step()
    await h.settle()

    advice = await h.advice("71")
    assert [(a["attempt"], a["action"]) for a in advice] == [(0, "requeue"), (1, "requeue")]
    assert h.scheduler.jobs["71"].attempt == 2


async def test_a_requeued_job_waiting_in_the_queue_is_not_a_hang(make_harness: scenario.MakeHarness) -> None:
    """Someone else (preemption, an operator) requeued a healthy job; it waits longer than the hang
    timeout before it runs again. Its old run is over: its silence is not a hang."""
    h = await make_harness()  # act: hangTimeout 60s
    h.submit("72")
    h.write("72", *scenario.ranked(0, "iteration 1 loss 2.3"))
    await h.step()
    h.change("72", state=workloads.JobState.PENDING, attempt=1, nodes=[])
    await h.step()

    for _ in range(5):
        await h.step(30)
    await h.recoveries()

    assert await h.records("72", vocab.AuditKind.ANOMALY) == []
    assert h.scheduler.mutating_calls() == []


async def test_checkpoints_count_for_a_workload_a_policy_covers_only_later(
    make_harness: scenario.MakeHarness,
) -> None:
    """A job selects a policy that does not exist yet; then the RecoveryPolicy is created. Its
    checkpoint lines must count, or maxAttemptsWithoutCheckpoint stops a job that makes progress."""
    h = await make_harness()
    h.submit("73", "trainguard policy=later")
    await h.step()
    assert h.runtime("73").spec is None

    h.engine.update_policies(loader.parse_text(scenario.POLICIES + "---\n" + LATER, "with later"))
    for attempt in (0, 1):
        if attempt:
            h.scheduler.start("73", ["node1", "node2"])
            await h.step()
        h.write("73", *scenario.ranked(0, f"saved checkpoint at iteration {100 * (attempt + 1)}"),
                *scenario.ranked(1, *scenario.TRACEBACK))
        await h.step()
        await h.settle()

    advice = await h.advice("73")
    assert [(a["attempt"], a["action"]) for a in advice] == [(0, "requeue"), (1, "requeue")]


LIMITED = """
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: act}
spec:
  mode: Action
  detection: {settle: 1s}
  blastRadius: {maxActionsPerHour: 2}
"""


async def test_an_advice_resumed_after_a_restart_still_respects_the_blast_radius(
    make_harness: scenario.MakeHarness,
) -> None:
    """The process died right after the durable advice write of a third recovery (no step began).
    On restart the resumed advice must be checked against the limit like any other."""
    h = await make_harness(policies=LIMITED)
    for job_id, nodes in (("74", ("node1", "node2")), ("75", ("node3", "node4")), ("76", ("node5", "node6"))):
        h.submit(job_id, nodes=nodes)
    await h.step()
    for job_id in ("74", "75"):
        h.write(job_id, *scenario.ranked(1, scenario.XID_79))
        await h.step()
        await h.settle()
    assert len(h.scheduler.mutations) == 6
    item = advice_mod.Advice(
        workload=scenario.workload_of("76"), attempt=0, generation=1, action=vocab.AdviceAction.REQUEUE,
        exclude_nodes=["node6"], reasons=["hardware failure: requeue"], mode=vocab.Mode.ACTION,
        deadline=h.clock.now() + 300, policy="act",
    )
    await h.store.record_advice(item, at=h.clock.now())

    restarted = h.new_engine()
    await restarted.recover()

    assert h.mutations("76") == []
    [outcome] = await h.outcomes("76")
    assert outcome["disposition"] == "Abandoned"
    assert "maxActionsPerHour 2" in outcome["detail"]


SLOW_WINDOW = """
apiVersion: trainguard.dev/v1alpha1
kind: RecoveryPolicy
metadata: {name: act}
spec:
  mode: Action
  detection: {settle: 1s, throughputWindow: 60s}
"""


async def test_a_recorded_straggler_does_not_swallow_the_crash_that_follows(
    make_harness: scenario.MakeHarness,
) -> None:
    """A throughput drop is recorded with advice ``none`` (throughputDropAction off); then the job is
    killed (exit 137, attribution unknown, like the straggler's). The crash still needs its requeue."""
    h = await make_harness(policies=SLOW_WINDOW)
    h.submit("77")
    await h.step()
    step = 0
    for rate, lines in ((1000, 60), (200, 15)):  # 10 min at full speed, then 2.5 min at a fifth
        for _ in range(lines):
            step += 1
            h.write("77", f"step {step} loss 2.0 tokens/s: {rate}")
            await h.step(10)
    [straggler] = await h.advice("77")
    assert straggler["action"] == "none"

    h.fail("77", exit_code=137)
    await h.step()
    await h.recoveries()

    [_, crash] = await h.advice("77")
    assert (crash["generation"], crash["action"]) == (2, "requeue")
    assert h.mutations("77") == ["requeue"]
