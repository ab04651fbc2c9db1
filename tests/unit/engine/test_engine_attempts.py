"""Engine across attempts: a requeued job's next run, checkpoint progress, and hangs."""

from __future__ import annotations

import os

from tests.unit.engine import scenario
from trainguard.model import vocab, workloads
from trainguard.store import queries

TEARDOWN = (
    "slurmstepd: error: *** JOB 30 ON node1 CANCELLED AT 2027-01-15T08:00:05 DUE TO JOB REQUEUE ***",
    *scenario.ranked(0, *scenario.TRACEBACK),
    *scenario.ranked(0, "[E ProcessGroupNCCL.cpp:475] [Rank 0] Watchdog caught collective operation timeout: "
                     "WorkNCCL(SeqNum=42, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600012 milliseconds"),
)
"""What the old attempt's processes print while Slurm tears them down for the requeue: a fresh
detector would read an application crash into it."""


async def anomaly_attempts(h: scenario.Harness, job_id: str) -> list[int]:
    return [r.attempt for r in await h.records(job_id, vocab.AuditKind.ANOMALY)]


async def test_a_new_attempt_gets_its_detector_only_once_it_runs(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness()
    h.submit("30")
    h.write("30", *scenario.ranked(1, *scenario.TRACEBACK))
    await h.step()
    await h.settle()
    assert h.scheduler.jobs["30"].attempt == 1  # requeued by the application advice
    assert h.scheduler.jobs["30"].state is workloads.JobState.PENDING

    await h.step()  # discovery sees attempt 1, still pending
    h.write("30", *TEARDOWN)
    await h.step()
    await h.settle()

    rt = h.runtime("30")
    old = rt.detector
    assert old is not None and old.attempt == 0 and rt.detector_attempt == 0
    assert await anomaly_attempts(h, "30") == [0]

    h.scheduler.start("30", ["node3", "node4"])
    await h.step()
    assert rt.detector is not old and rt.detector is not None
    assert (rt.detector.attempt, rt.detector_attempt) == (1, 1)
    h.write("30", *scenario.ranked(0, "iteration 1 loss 2.3"), *scenario.ranked(1, "iteration 1 loss 2.3"))
    await h.step()
    await h.settle()
    assert await anomaly_attempts(h, "30") == [0]

    # the new detector does watch attempt 1, with the new node list (rank 1 -> node4)
    h.write("30", *scenario.ranked(1, scenario.XID_79))
    await h.step()
    await h.settle()
    assert await anomaly_attempts(h, "30") == [0, 1]
    advice = await h.advice("30")
    assert [(a["attempt"], a["action"], a["exclusions"]) for a in advice] == [
        (0, "requeue", []), (1, "requeue", ["node4"])]


async def test_attempts_without_a_new_checkpoint_stop_the_job(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness()
    h.submit("31", "trainguard policy=act max-retries=5 max-attempts-without-checkpoint=2")

    # attempt 0 saves a checkpoint, then crashes: requeue
    h.write("31", *scenario.ranked(0, "iteration 100 loss 2.0", "saved checkpoint to /ckpt/iter_100"),
            *scenario.ranked(1, *scenario.TRACEBACK))
    await h.step()
    await h.settle()
    # attempts 1 and 2 crash without saving one: requeue once more, then stop
    for _ in (1, 2):
        h.scheduler.start("31", ["node1", "node2"])
        await h.step()
        h.write("31", *scenario.ranked(0, "iteration 100 loss 2.0"), *scenario.ranked(1, *scenario.TRACEBACK))
        await h.step()
        await h.settle()

    advice = await h.advice("31")
    assert [(a["attempt"], a["action"]) for a in advice] == [(0, "requeue"), (1, "requeue"), (2, "stop")]
    assert any("2 attempts in a row without a new checkpoint" in reason for reason in advice[2]["reasons"])
    assert h.mutations("31") == ["requeue", "requeue", "cancel"]
    history = h.runtime("31").history
    assert [(a.attempt, a.checkpoint_saved) for a in history.attempts] == [(0, True), (1, False), (2, False)]


async def test_checkpoint_lines_keep_the_retry_going(make_harness: scenario.MakeHarness) -> None:
    """The control for the test above: the same crashes, each after a new checkpoint, are requeued."""
    h = await make_harness()
    h.submit("33", "trainguard policy=act max-retries=5 max-attempts-without-checkpoint=2")
    for attempt in (0, 1, 2):
        if attempt:
            h.scheduler.start("33", ["node1", "node2"])
            await h.step()
        h.write("33", *scenario.ranked(0, f"Saving checkpoint at iteration {100 * (attempt + 1)}"),
                *scenario.ranked(1, *scenario.TRACEBACK))
        await h.step()
        await h.settle()

    advice = await h.advice("33")
    assert [(a["attempt"], a["action"]) for a in advice] == [(0, "requeue"), (1, "requeue"), (2, "requeue")]
    assert h.mutations("33") == ["requeue"] * 3


async def test_progress_then_silence_past_the_hang_timeout_requeues(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness()  # policy act: hangTimeout 60s
    h.submit("32")
    h.write("32", *scenario.ranked(0, "iteration 1 loss 2.3"), *scenario.ranked(1, "iteration 1 loss 2.3"))
    await h.step()
    await h.step(30)
    h.write("32", *scenario.ranked(0, "iteration 2 loss 2.2"), *scenario.ranked(1, "iteration 2 loss 2.2"))
    await h.step()

    await h.step(60)  # exactly the timeout: not yet
    assert await h.records("32") == []
    await h.step(1)
    await h.recoveries()

    [anomaly] = await h.records("32", vocab.AuditKind.ANOMALY)
    assert (anomaly.payload["symptom"], anomaly.payload["category"]) == ("hang", "progress_stalled")
    [advice] = await h.advice("32")
    assert (advice["action"], advice["exclusions"]) == ("requeue", [])
    assert h.mutations("32") == ["requeue"]
    assert h.scheduler.jobs["32"].attempt == 1


async def test_a_job_that_ended_is_no_hang_when_its_last_lines_are_read_after_the_timeout(
    make_harness: scenario.MakeHarness,
) -> None:
    """The job went quiet, then ended successfully; we see the end in the same round as the silence
    passing the hang timeout. Its last lines are read at the end (the drain) and the detector ticks
    once more: a silence of a job that no longer runs is no hang, there as in the tailing round."""
    h = await make_harness()  # policy act: hangTimeout 60s
    h.submit("34")
    h.write("34", *scenario.ranked(0, "iteration 1 loss 2.3"), *scenario.ranked(1, "iteration 1 loss 2.3"))
    await h.step()
    h.write("34", *scenario.ranked(0, "saving the final model"))
    h.change("34", state=workloads.JobState.COMPLETED)
    await h.step(61)
    await h.settle()

    assert await h.records("34", vocab.AuditKind.ANOMALY) == []
    assert h.mutations("34") == []


async def test_a_restart_of_ours_keeps_counting_attempts_without_a_checkpoint(
    make_harness: scenario.MakeHarness,
) -> None:
    """The no-progress budget spans attempts; an engine restarted between two of them must not
    grant the crash-looping job a fresh budget (nor number its next advice as an earlier one)."""
    h = await make_harness()
    h.submit("32", "trainguard policy=act max-retries=5 max-attempts-without-checkpoint=2")
    h.write("32", *scenario.ranked(0, "iteration 100 loss 2.0", "saved checkpoint to /ckpt/iter_100"),
            *scenario.ranked(1, *scenario.TRACEBACK))
    await h.step()
    await h.settle()
    h.scheduler.start("32", ["node1", "node2"])
    await h.step()
    h.write("32", *scenario.ranked(0, "iteration 100 loss 2.0"), *scenario.ranked(1, scenario.XID_79))
    await h.step()
    await h.settle()
    assert [(a["attempt"], a["action"], a["exclusions"]) for a in await h.advice("32")] == [
        (0, "requeue", []), (1, "requeue", ["node2"])]

    h.engine = h.new_engine()  # our process restarts while attempt 2 waits in the queue
    await h.engine.recover()
    h.scheduler.start("32", ["node1", "node3"])
    await h.step()
    rt = h.runtime("32")
    assert rt.history.excluded_nodes == ["node2"] and rt.history.advice_generation == 2
    assert [r.checkpoint_saved for r in rt.history.attempts[:2]] == [True, False]
    h.write("32", *scenario.ranked(0, "iteration 100 loss 2.0"), *scenario.ranked(1, *scenario.TRACEBACK))
    await h.step()
    await h.settle()

    advice = await h.advice("32")
    assert [(a["attempt"], a["generation"], a["action"]) for a in advice] == [
        (0, 1, "requeue"), (1, 2, "requeue"), (2, 3, "stop")]
    assert any("2 attempts in a row without a new checkpoint" in reason for reason in advice[2]["reasons"])
    assert h.mutations("32")[-1] == "cancel"


async def test_the_store_follows_the_jobs_state_and_closes_a_requeued_attempt(
    make_harness: scenario.MakeHarness,
) -> None:
    """What the API and console list comes from the store: the workload's state must follow the
    scheduler, and an attempt that was requeued must not stay RUNNING forever."""
    h = await make_harness()
    h.submit("33")
    await h.step()
    assert (await h.store.get_workload(scenario.workload_of("33"))).state == "RUNNING"
    h.write("33", *scenario.ranked(1, *scenario.TRACEBACK))
    await h.step()
    await h.settle()
    await h.step()  # discovery sees attempt 1, pending
    assert (await h.store.get_workload(scenario.workload_of("33"))).state == "PENDING"
    h.scheduler.start("33", ["node3", "node4"])
    await h.step()
    h.change("33", state=workloads.JobState.COMPLETED)
    await h.step()

    assert (await h.store.get_workload(scenario.workload_of("33"))).state == "COMPLETED"
    attempts = await queries.ReadQueries(h.store.sql_engine).attempts(scenario.workload_of("33"))
    assert [(a.attempt, a.state, a.ended_at is not None) for a in attempts] == [
        (0, "REQUEUED", True), (1, "COMPLETED", True)]


async def test_a_first_run_that_printed_before_our_first_look_is_read_from_its_start(
    make_harness: scenario.MakeHarness,
) -> None:
    """The listing said PENDING, the job started and printed its Xid, then we looked at the file:
    every look came after the start. The first run's output is all its own: its first line must be
    judged, not skipped as if an earlier attempt had written it (seen on a busy CI machine)."""
    h = await make_harness()
    start = scenario.START + 1
    h.clock.advance(2.0)  # the job starts at `start`; our first listing comes a moment later
    h.submit("41", state=workloads.JobState.PENDING, started_at=start)  # the listing is a little behind
    h.write("41", *scenario.ranked(0, "iteration 1"), *scenario.ranked(1, scenario.XID_79))
    os.utime(h.output("41"), (start + 0.5, start + 0.5))  # written by the run, after its start
    await h.step()  # first sight: pending; the look at the file comes after the start
    h.change("41", state=workloads.JobState.RUNNING, nodes=["node1", "node2"], started_at=start)
    await h.step(1.0)
    await h.settle()

    anomalies = await h.records("41", vocab.AuditKind.ANOMALY)
    assert [(r.attempt, r.payload["category"], r.payload["suspect_nodes"]) for r in anomalies] == [
        (0, "gpu_fallen_off_bus", ["node2"])]


async def test_an_attempt_replaced_while_its_crash_window_settles_is_judged_on_the_old_attempt(
        make_harness: scenario.MakeHarness) -> None:
    """The workload's own restart policy starts the next attempt within a second of the failure (a
    PyTorchJob's re-created pod): the Xid read into the old attempt's still-open crash window is
    judged on that attempt before the new detector takes over, not dropped with the old detector."""
    h = await make_harness()
    h.submit("31", exclusions_while_running=True)  # a Kubernetes workload: it restarts itself by design
    await h.step()
    h.write("31", *scenario.ranked(1, scenario.XID_79))
    await h.step()
    rt = h.runtime("31")
    assert rt.detector is not None and rt.detector.settling
    assert await anomaly_attempts(h, "31") == []
    h.change("31", attempt=1, state=workloads.JobState.RUNNING)
    await h.step()
    await h.settle()
    assert rt.detector is not None and rt.detector.attempt == 1
    assert await anomaly_attempts(h, "31") == [0]
    [advice] = await h.advice("31")
    assert advice["attempt"] == 0 and advice["action"] == "requeue" and advice["exclusions"]
