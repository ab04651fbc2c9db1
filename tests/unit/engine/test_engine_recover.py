"""Engine start after a killed run: ``recover()`` never leaves a job held by us and never repeats a step.

The "kill" is an exception that no handler of ours catches (a BaseException, as a SIGKILL would
leave things): raised by the scheduler right after ``requeue_hold`` took effect, it ends the
recovery task with the job held and the step's intent row written but not finished. A second
Engine on the same store and scheduler plays the restarted process.
"""

from __future__ import annotations

import pytest

from tests.unit.engine import scenario
from trainguard.model import actions, vocab
from trainguard.schedulers import base


class Killed(BaseException):
    """The process died here."""


def kill() -> None:
    raise Killed


async def killed_after_requeue_hold(h: scenario.Harness, job_id: str) -> None:
    h.submit(job_id)
    h.scheduler.after["requeue_hold"] = kill
    h.write(job_id, *scenario.ranked(1, scenario.XID_79))
    await h.step()
    h.clock.advance(scenario.SETTLE_S + 0.5)
    await h.engine.tail()
    task = h.runtime(job_id).task
    assert task is not None
    with pytest.raises(Killed):
        await task
    del h.scheduler.after["requeue_hold"]
    job = h.scheduler.jobs[job_id]
    assert (job.attempt, job.held) == (1, True)
    [row] = await h.store.actions_for(scenario.workload_of(job_id), 0, 1)
    assert (row.step, row.status) == ("requeue_hold", actions.ActionStatus.INTENT)


async def test_recover_past_the_deadline_releases_the_hold(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness()
    await killed_after_requeue_hold(h, "60")

    h.clock.advance(301)  # past the 5 min watchdog deadline of the advice
    restarted = h.new_engine()
    await restarted.recover()

    assert h.mutations("60") == ["requeue_hold", "release"]
    assert not h.scheduler.jobs["60"].held
    [watchdog] = await h.records("60", vocab.AuditKind.WATCHDOG)
    assert watchdog.payload["released_hold"] is True
    [outcome] = await h.outcomes("60")
    assert outcome["disposition"] == "Abandoned"
    assert await h.store.pending_advice() == []


async def test_recover_within_the_deadline_resumes_without_repeating_the_requeue(
    make_harness: scenario.MakeHarness,
) -> None:
    h = await make_harness()
    await killed_after_requeue_hold(h, "61")

    h.clock.advance(10)
    restarted = h.new_engine()
    await restarted.recover()

    assert h.mutations("61") == ["requeue_hold", "exclude_nodes", "release"]
    job = h.scheduler.jobs["61"]
    assert (job.attempt, job.held, job.excluded_nodes) == (1, False, ["node2"])
    rows = {r.step: r for r in await h.store.actions_for(scenario.workload_of("61"), 0, 1)}
    assert rows["requeue_hold"].status is actions.ActionStatus.DONE
    assert rows["requeue_hold"].error == "took effect before a restart"
    [outcome] = await h.outcomes("61")
    assert outcome["disposition"] == "Converged"


async def test_recover_releases_a_hold_whose_release_failed_in_the_previous_run(
    make_harness: scenario.MakeHarness,
) -> None:
    h = await make_harness()
    h.submit("62")
    h.scheduler.fail["release"] = base.SchedulerError("slurm_update error: Unable to contact slurm controller")
    h.write("62", *scenario.ranked(1, scenario.XID_79))
    await h.step()
    await h.settle()
    [outcome] = await h.outcomes("62")
    assert outcome["disposition"] == "Abandoned"
    assert h.scheduler.jobs["62"].held  # the controller was away: the watchdog could not release either

    del h.scheduler.fail["release"]
    restarted = h.new_engine()
    await restarted.recover()

    assert not h.scheduler.jobs["62"].held
    assert h.mutations("62") == ["requeue_hold", "exclude_nodes", "release"]
    watchdog = [r.payload for r in await h.records("62", vocab.AuditKind.WATCHDOG)]
    assert watchdog[-1]["released_hold"] is True
    assert watchdog[-1]["reason"] == "hold of ours left after the generation closed"
