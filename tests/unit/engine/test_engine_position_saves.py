"""Read positions are saved by the tailing round at most every ``position_save_interval_s`` (at
10,000 workloads a save every round was four large write transactions a second), never ahead of
what detection has handled, at once with each decision, and all of them when the engine stops."""

from __future__ import annotations

import asyncio

from tests.unit.engine import scenario


async def offsets(h: scenario.Harness, job_id: str) -> list[int]:
    return [r.offset for r in await h.store.tail_positions(scenario.workload_of(job_id))]


async def test_positions_are_saved_every_interval_and_when_the_engine_stops(
    make_harness: scenario.MakeHarness,
) -> None:
    h = await make_harness(position_save_interval_s=5.0)
    h.submit("1")
    h.write("1", "step 1 | loss 2.0 | 100.0 samples/s")
    await h.step()
    first = h.output("1").stat().st_size
    assert await offsets(h, "1") == [first]
    h.write("1", "step 2 | loss 2.0 | 100.0 samples/s")
    await h.step(1.0)
    assert await offsets(h, "1") == [first], "no write transaction for every round"
    h.write("1", "step 3 | loss 2.0 | 100.0 samples/s")
    await h.step(4.0)
    third = h.output("1").stat().st_size
    assert await offsets(h, "1") == [third]

    h.write("1", "step 4 | loss 2.0 | 100.0 samples/s")
    await h.step(1.0)  # read and handled, not saved yet
    stop = asyncio.Event()
    running = asyncio.ensure_future(h.engine.run(stop))
    for _ in range(10_000):  # until its timer loops run (the start-up recovery is done)
        if h.engine.timer("tailing") is not None:
            break
        await asyncio.sleep(0.001)
    stop.set()
    await running  # a clean stop saves what the last rounds moved
    assert await offsets(h, "1") == [h.output("1").stat().st_size]


async def test_a_decision_still_saves_its_position_at_once(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness(position_save_interval_s=3600.0)
    h.submit("1")
    await h.step()
    h.write("1", *scenario.ranked(1, scenario.XID_79))
    await h.step(1.0)
    await h.settle()
    assert "advice" in await h.kinds("1")
    assert await offsets(h, "1") == [h.output("1").stat().st_size]
