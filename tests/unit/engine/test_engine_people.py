"""The engine and people's decisions: a user's cancel, a person's requeue, the scheduler's time limit,
and endings nobody watched are recorded (an ``action`` record with status ``not-ours``) and never
answered with a recovery; a failure we were tracking that happened while we were down still is."""

from __future__ import annotations

from tests.unit.engine import scenario
from trainguard.model import vocab, workloads

S = workloads.JobState
CANCEL_LINES = (
    "slurmstepd: error: *** JOB 5 ON node1 CANCELLED AT 2027-01-15T08:00:00 ***",
    "slurmstepd: error: *** STEP 5.0 ON node1 CANCELLED AT 2027-01-15T08:00:00 ***",
    "srun: error: node2: task 1: Terminated",
    "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
)


async def not_ours(h: scenario.Harness, job_id: str) -> list[dict[str, object]]:
    return [r.payload for r in await h.records(job_id, vocab.AuditKind.ACTION) if r.payload.get("status") == "not-ours"]


async def test_a_users_scancel_is_recorded_and_never_requeued(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness()
    h.submit("5")
    await h.step()
    h.write("5", *scenario.ranked(0, "iteration 10"))
    await h.step(1.0)
    h.change("5", state=S.CANCELLED, exit_signal=15)  # scancel: the controller marks it first
    h.write("5", *CANCEL_LINES)
    await h.step(0.5)
    await h.settle()

    assert h.mutations("5") == []
    assert await h.advice("5") == []
    assert [a.payload["category"] for a in await h.records("5", vocab.AuditKind.ANOMALY)] == []
    [change] = await not_ours(h, "5")
    assert (change["by"], change["change"]) == ("person", "cancelled")


async def test_the_time_limit_is_the_schedulers_and_a_persons_requeue_is_theirs(
        make_harness: scenario.MakeHarness) -> None:
    h = await make_harness()
    h.submit("6")
    h.submit("7")
    await h.step()
    h.change("6", state=S.TIMEOUT)
    h.write("6", "slurmstepd: error: *** JOB 6 ON node1 CANCELLED AT 2027-01-15T08:00:00 DUE TO TIME LIMIT ***")
    h.change("7", state=S.PENDING, attempt=1, nodes=[])  # scontrol requeue by a person
    h.write("7", "slurmstepd: error: *** JOB 7 ON node1 CANCELLED AT 2027-01-15T08:00:00 DUE TO JOB REQUEUE ***")
    await h.step(0.5)
    await h.settle()

    assert h.mutations() == []
    assert await h.advice("6") == [] and await h.advice("7") == []
    assert [(c["by"], c["change"]) for c in await not_ours(h, "6")] == [("scheduler", "time-limit")]
    assert [(c["by"], c["change"]) for c in await not_ours(h, "7")] == [("person", "requeued")]


async def test_a_failure_that_ended_before_we_ever_watched_is_recorded_not_acted_on(
        make_harness: scenario.MakeHarness) -> None:
    h = await make_harness()
    ended = scenario.START - 600
    h.submit("8", state=S.FAILED, exit_code=1, started_at=ended - 60, ended_at=ended)
    h.write("8", *scenario.ranked(1, scenario.XID_79))
    h.submit("9", state=S.CANCELLED, started_at=ended - 60, ended_at=ended)
    await h.step()
    await h.settle()

    assert h.mutations() == []
    assert await h.advice("8") == [] and await h.advice("9") == []
    assert await h.records("8", vocab.AuditKind.ANOMALY) == []
    assert [c["change"] for c in await not_ours(h, "8")] == ["ended-unwatched"]
    assert [c["change"] for c in await not_ours(h, "9")] == ["ended-unwatched"]


async def test_a_failure_in_the_second_we_started_was_watched_and_one_a_second_earlier_was_not(
        make_harness: scenario.MakeHarness) -> None:
    """Slurm gives end times in whole seconds: a job submitted just after we started and failed at once
    ends "before" our fractional start time. The comparison is to the second (seen on the real cluster:
    a job submitted right after ``trainguard run`` was ready was recorded as ended unwatched)."""
    h = await make_harness()
    h.clock.advance(0.7)
    fresh = h.new_engine()
    h.submit("12", state=S.FAILED, exit_code=1, started_at=scenario.START, ended_at=scenario.START)
    h.write("12", *scenario.ranked(1, scenario.XID_79))
    h.submit("13", state=S.FAILED, exit_code=1, started_at=scenario.START - 1, ended_at=scenario.START - 1)
    h.write("13", *scenario.ranked(1, scenario.XID_79))
    await fresh.discover()
    await fresh.tail()
    h.clock.advance(scenario.SETTLE_S + 0.5)
    await fresh.discover()
    await fresh.tail()
    for rt in fresh.runtimes.values():
        if rt.task is not None:
            await rt.task

    [advice] = await h.advice("12")
    assert advice["action"] == "requeue"
    assert await not_ours(h, "12") == []
    assert await h.advice("13") == []
    assert [c["change"] for c in await not_ours(h, "13")] == ["ended-unwatched"]


async def test_a_failure_while_we_were_down_of_a_job_we_tracked_is_recovered(
        make_harness: scenario.MakeHarness) -> None:
    h = await make_harness()
    h.submit("10")
    await h.step()
    h.write("10", *scenario.ranked(0, "iteration 1"))
    await h.step(1.0)
    # we stop; the job fails while nobody watches; a new engine on the same store starts
    h.clock.advance(120)
    h.write("10", *scenario.ranked(1, scenario.XID_79))
    h.change("10", state=S.FAILED, exit_code=1, ended_at=h.clock.now() - 30)
    again = h.new_engine()
    await again.recover()
    await again.discover()
    await again.tail()
    h.clock.advance(scenario.SETTLE_S + 0.5)
    await again.discover()
    await again.tail()
    for rt in again.runtimes.values():
        if rt.task is not None:
            await rt.task

    [advice] = await h.advice("10")
    assert advice["action"] == "requeue" and advice["exclusions"] == ["node2"]
    assert "requeue_hold" in h.mutations("10")


async def test_a_kubernetes_object_deleted_before_it_finished_is_recorded_as_a_persons_deletion(
        make_harness: scenario.MakeHarness) -> None:
    h = await make_harness()
    h.submit("11", incarnation="uid-1", exclusions_while_running=True)
    await h.step()
    del h.scheduler.jobs["11"]  # kubectl delete jobset
    await h.step(1.0)

    assert [(c["by"], c["change"]) for c in await not_ours(h, "11")] == [("person", "deleted")]
    assert h.mutations() == []


async def test_a_cancel_read_at_decision_time_before_discovery_still_ends_the_attempt(
        make_harness: scenario.MakeHarness) -> None:
    """The teardown lines are judged before discovery has listed the job as cancelled (a busy machine):
    the fresh read made for that decision must not hide the job's end from discovery, or the attempt is
    never closed and the workload never let go (seen on real Slurm)."""
    h = await make_harness()
    h.submit("12")
    await h.step()
    h.write("12", *scenario.ranked(0, "iteration 10"))
    await h.step(1.0)
    h.change("12", state=S.CANCELLED, exit_signal=15)
    h.write("12", *CANCEL_LINES)
    h.clock.advance(0.5)
    await h.engine.tail()  # read before any listing shows the cancel
    h.clock.advance(scenario.SETTLE_S + 0.5)
    await h.engine.tail()
    assert [c["change"] for c in await not_ours(h, "12")] == ["cancelled"]
    await h.step(1.0)  # discovery sees it cancelled
    assert h.runtime("12").finished_at is not None
    await h.step(h.engine.settings.finished_grace_s + 1)
    assert scenario.workload_of("12") not in h.engine.runtimes
