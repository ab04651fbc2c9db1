"""A restarted engine reads each output file from where detection stopped, never old attempts' lines.

Each test runs engine A (the process before the restart) until some point of a hardware
recovery, then a second Engine on the same store and scheduler (``Harness.new_engine``) plays the
restarted process. The job's output is a real file: appended to across attempts (Slurm's
``--open-mode=append``), or truncated when the next attempt starts (Slurm's default). Every
test ends with exactly one requeue, excluding only the node that had the Xid.
"""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from tests.unit.engine import scenario
from trainguard import engine as engine_mod
from trainguard.model import vocab, workloads
from trainguard.schedulers import base
from trainguard.store import audit

HEALTHY = scenario.ranked(0, "iteration 7 loss 1.9") + scenario.ranked(1, "iteration 7 loss 1.9")
REQUEUE_WITHOUT_NODE2 = ["requeue_hold", "exclude_nodes", "release"]


async def round_of(engine: engine_mod.Engine) -> None:
    await engine.discover()
    await engine.tail()


async def settle(h: scenario.Harness, engine: engine_mod.Engine) -> None:
    """Let any crash window pass, then finish the engine's recoveries."""
    h.clock.advance(scenario.SETTLE_S + 0.5)
    await round_of(engine)
    for rt in engine.runtimes.values():
        if rt.task is not None:
            await rt.task


async def restarted(h: scenario.Harness) -> engine_mod.Engine:
    engine = h.new_engine()
    await engine.recover()
    await round_of(engine)
    return engine


async def xid_on_attempt_0(h: scenario.Harness, job_id: str) -> None:
    """Attempt 0 prints the Xid; engine A decides and requeues the job without node2."""
    h.submit(job_id)
    h.write(job_id, *HEALTHY, *scenario.ranked(1, scenario.XID_79))
    await h.step()
    await h.settle()
    assert h.mutations(job_id) == REQUEUE_WITHOUT_NODE2
    assert h.scheduler.jobs[job_id].state is workloads.JobState.PENDING


def start_attempt(h: scenario.Harness, job_id: str, *, truncate: bool) -> None:
    h.scheduler.start(job_id, ["node1", "node3"])
    if truncate:
        h.output(job_id).write_text("")  # Slurm's default: the new attempt truncates the file
    h.write(job_id, *HEALTHY)


async def assert_one_requeue(h: scenario.Harness, job_id: str) -> None:
    assert h.mutations(job_id) == REQUEUE_WITHOUT_NODE2
    assert h.scheduler.jobs[job_id].excluded_nodes == ["node2"]
    assert [(a["attempt"], a["action"], a["exclusions"]) for a in await h.advice(job_id)] == [
        (0, "requeue", ["node2"])]
    assert {r.attempt for r in await h.records(job_id, vocab.AuditKind.ANOMALY)} == {0}


@pytest.mark.parametrize("truncate", [False, True], ids=["append", "truncate"])
async def test_restart_while_the_new_attempt_runs(make_harness: scenario.MakeHarness, truncate: bool) -> None:
    h = await make_harness()
    await xid_on_attempt_0(h, "70")
    start_attempt(h, "70", truncate=truncate)
    await h.step()
    await h.settle()

    engine = await restarted(h)
    h.write("70", *HEALTHY)
    await settle(h, engine)
    await assert_one_requeue(h, "70")
    rt = engine.runtimes[scenario.workload_of("70")]
    assert rt.detector is not None and rt.detector.attempt == 1

    h.write("70", *scenario.ranked(0, scenario.XID_79))  # a real fault of attempt 1 is still seen
    await round_of(engine)
    await settle(h, engine)
    assert [(a["attempt"], a["exclusions"]) for a in await h.advice("70")] == [(0, ["node2"]), (1, ["node2", "node1"])]


@pytest.mark.parametrize("truncate", [False, True], ids=["append", "truncate"])
async def test_restart_while_the_requeued_job_is_pending(make_harness: scenario.MakeHarness, truncate: bool) -> None:
    h = await make_harness()
    await xid_on_attempt_0(h, "71")

    engine = await restarted(h)
    await settle(h, engine)
    await assert_one_requeue(h, "71")
    rt = engine.runtimes[scenario.workload_of("71")]
    assert rt.detector is None, "no attempt runs: nothing is judged"

    h.clock.advance(5)
    start_attempt(h, "71", truncate=truncate)
    await round_of(engine)
    await settle(h, engine)
    await assert_one_requeue(h, "71")
    assert rt.detector is not None and rt.detector.attempt == 1
    h.write("71", *scenario.ranked(1, scenario.XID_79))
    await round_of(engine)
    await settle(h, engine)
    assert [(a["attempt"], a["exclusions"]) for a in await h.advice("71")] == [(0, ["node2"]), (1, ["node2", "node3"])]


@pytest.mark.parametrize("truncate", [False, True], ids=["append", "truncate"])
async def test_restart_between_the_failure_and_the_requeue(make_harness: scenario.MakeHarness, truncate: bool) -> None:
    """Engine A read the Xid (its crash window is open) and died before deciding."""
    h = await make_harness()
    h.submit("72")
    h.write("72", *HEALTHY)
    await h.step()
    h.write("72", *scenario.ranked(1, scenario.XID_79))
    await h.step()  # read, window open: not stored as read
    assert h.runtime("72").detector is not None and h.runtime("72").detector.settling  # type: ignore[union-attr]
    h.fail("72")

    engine = await restarted(h)
    await settle(h, engine)
    assert h.mutations("72") == REQUEUE_WITHOUT_NODE2
    start_attempt(h, "72", truncate=truncate)
    await round_of(engine)
    await settle(h, engine)
    await assert_one_requeue(h, "72")


async def test_a_decision_stores_the_lines_behind_it_as_read(make_harness: scenario.MakeHarness) -> None:
    """The advice was recorded but not carried out (the scheduler refused): attempt 0 still runs
    when the engine restarts, and the Xid behind the recorded decision is not read again."""
    h = await make_harness()
    h.submit("73")
    h.write("73", *HEALTHY, *scenario.ranked(1, scenario.XID_79))
    await h.step()
    h.scheduler.fail["requeue_hold"] = base.SchedulerError("scheduler unreachable")
    await h.settle()
    assert h.mutations("73") == []
    del h.scheduler.fail["requeue_hold"]

    engine = await restarted(h)
    h.write("73", *HEALTHY)
    await round_of(engine)
    await settle(h, engine)
    assert len(await h.records("73", vocab.AuditKind.ANOMALY)) == 1
    assert len(await h.advice("73")) == 1


async def test_first_sight_of_a_running_attempt_skips_lines_stamped_before_its_start(
    make_harness: scenario.MakeHarness,
) -> None:
    """A fresh store (no saved position) and an appended file: only lines stamped after the start count."""
    h = await make_harness()
    started = time.time() - 60
    old = time.strftime("%b %d %H:%M:%S", time.localtime(started - 30))
    new = time.strftime("%b %d %H:%M:%S", time.localtime(started + 5))
    h.submit("74", attempt=1, started_at=started)
    h.write("74", f"1: {old} node2 kernel: {scenario.XID_79}", *HEALTHY,
            f"0: {new} node1 train: attempt 1 starts", *HEALTHY)
    await h.step()
    await h.settle()
    assert await h.advice("74") == []
    h.write("74", f"1: {new} node2 kernel: {scenario.XID_79}")
    await h.step()
    await h.settle()
    assert [(a["attempt"], a["exclusions"]) for a in await h.advice("74")] == [(1, ["node2"])]


async def test_first_sight_without_any_way_to_place_old_lines_skips_them_and_records_it(
    make_harness: scenario.MakeHarness,
) -> None:
    h = await make_harness()
    h.submit("75", attempt=2, started_at=time.time() - 60)
    h.write("75", *scenario.ranked(1, scenario.XID_79), *HEALTHY)  # no timestamps, written after the start
    await h.step()
    await h.settle()
    assert await h.advice("75") == []
    [row] = await h.store.tail_positions(scenario.workload_of("75"))
    assert (row.attempt, row.basis, row.offset) == (2, "unknown", h.output("75").stat().st_size)
    h.write("75", *scenario.ranked(1, scenario.XID_79))  # printed after we first looked: this attempt's
    await h.step()
    await h.settle()
    assert [(a["attempt"], a["action"]) for a in await h.advice("75")] == [(2, "requeue")]


async def test_a_file_untouched_since_the_attempt_started_is_all_old(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness()
    h.write("76", *scenario.ranked(1, scenario.XID_79))
    started = time.time()
    os.utime(h.output("76"), (started - 100, started - 100))
    h.submit("76", attempt=1, started_at=started)
    await h.step()
    await h.settle()
    assert await h.advice("76") == []
    [row] = await h.store.tail_positions(scenario.workload_of("76"))
    assert row.basis == "mtime"


async def test_a_tailing_round_while_a_job_is_being_tracked_does_not_move_its_start(
    make_harness: scenario.MakeHarness, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Discovery and tailing are separate loops: a round that comes while the restarted engine is
    still placing a job's files must not read (or skip) anything of it."""
    h = await make_harness()
    h.submit("77", attempt=1)
    h.write("77", *HEALTHY)
    await h.step()
    h.write("77", *scenario.ranked(1, scenario.XID_79))  # printed while no engine ran
    h.fail("77")

    engine = h.new_engine()
    placed, gate = asyncio.Event(), asyncio.Event()
    save = h.store.save_tail_positions

    async def slow_save(records: list[audit.TailRecord], *, at: float) -> None:
        if not placed.is_set():  # the tracking's own save: the files are placed, the detector comes next
            placed.set()
            await gate.wait()
        await save(records, at=at)

    monkeypatch.setattr(h.store, "save_tail_positions", slow_save)
    discovery = asyncio.create_task(engine.discover())
    await placed.wait()
    await engine.tail()  # the tailing loop's round, in the middle of tracking
    gate.set()
    await discovery
    monkeypatch.setattr(h.store, "save_tail_positions", save)
    await round_of(engine)
    await settle(h, engine)
    assert [(a["attempt"], a["exclusions"]) for a in await h.advice("77")] == [(1, ["node2"])]


async def test_a_first_attempt_that_started_while_we_watched_is_read_from_its_start(
    make_harness: scenario.MakeHarness,
) -> None:
    """Listed a moment after it started (discovery polls): its early lines are its own."""
    h = await make_harness()
    started = h.engine.started_at + 0.5
    h.submit("78", started_at=started)
    h.write("78", *scenario.ranked(1, scenario.XID_79))
    os.utime(h.output("78"), (started + 1, started + 1))  # written after its start (the test clock's time)
    await h.step()
    await h.settle()
    assert [(a["attempt"], a["exclusions"]) for a in await h.advice("78")] == [(0, ["node2"])]
