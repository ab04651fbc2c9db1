"""Engine: when it lets go of a workload (finished past the grace period, or gone) and closes its files."""

from __future__ import annotations

from tests.unit.engine import scenario
from trainguard.model import workloads


async def test_a_finished_job_is_forgotten_after_the_grace_period_and_its_file_closed(
    make_harness: scenario.MakeHarness,
) -> None:
    h = await make_harness(finished_grace_s=30.0)
    h.submit("50")
    h.write("50", *scenario.ranked(0, "iteration 1 loss 2.3"))
    await h.step()
    assert scenario.open_fds(h.output("50")) == 1

    h.write("50", *scenario.ranked(0, "iteration 2 loss 2.2", "training done"))
    h.change("50", state=workloads.JobState.COMPLETED, exit_code=0)
    await h.step()
    assert h.runtime("50").finished_at == h.clock.now()
    await h.step(29)
    assert scenario.workload_of("50") in h.engine.runtimes

    await h.step(2)

    assert scenario.workload_of("50") not in h.engine.runtimes
    assert scenario.open_fds(h.output("50")) == 0
    assert await h.records("50") == []  # it completed: nothing to advise
    # Slurm keeps listing the finished job for a while: it is not tracked again...
    await h.step(5)
    assert scenario.workload_of("50") not in h.engine.runtimes
    # ...unless someone requeues it: a new run of the same workload
    h.change("50", state=workloads.JobState.PENDING, attempt=1, exit_code=None)
    await h.step()
    assert h.runtime("50").job.attempt == 1


async def test_a_failed_job_is_forgotten_once_its_recovery_is_done(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness(finished_grace_s=30.0)
    h.submit("52", "trainguard")  # Monitor: the failed job stays failed
    h.write("52", *scenario.ranked(1, *scenario.TRACEBACK))
    await h.step()
    h.fail("52")
    await h.step()
    await h.recoveries()
    assert [a["action"] for a in await h.advice("52")] == ["requeue"]

    await h.step(31)

    assert scenario.workload_of("52") not in h.engine.runtimes
    assert scenario.open_fds(h.output("52")) == 0


async def test_a_job_that_vanished_from_the_scheduler_is_forgotten_at_once(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness()
    h.submit("51")
    h.submit("53")
    h.write("51", *scenario.ranked(0, "iteration 1 loss 2.3"))
    h.write("53", *scenario.ranked(0, "iteration 1 loss 2.3"))
    await h.step()
    assert scenario.open_fds(h.output("51")) == 1

    del h.scheduler.jobs["51"]
    await h.step()

    assert sorted(h.engine.runtimes) == [scenario.workload_of("53")]
    assert scenario.open_fds(h.output("51")) == 0
    assert scenario.open_fds(h.output("53")) == 1
    assert await h.records("51") == []
