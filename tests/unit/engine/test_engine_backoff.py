"""Retry backoff: the first retry is immediate; later ones are requeued held and released when
``retries.backoff`` has passed (the engine's sweep releases them; the hold is ours, so the
watchdog's deadline lies beyond the release)."""

from __future__ import annotations

from tests.unit.engine import scenario


async def test_second_retry_is_held_until_the_backoff_has_passed(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness()
    h.submit("41", "trainguard policy=backoff")
    h.write("41", *scenario.ranked(1, *scenario.TRACEBACK))
    await h.step()
    await h.settle()
    assert h.mutations("41") == ["requeue"]  # retry 1: at once

    h.scheduler.start("41", ["node1", "node2"])
    await h.step()
    h.write("41", *scenario.ranked(1, *scenario.TRACEBACK))
    await h.step()
    await h.settle()
    assert h.mutations("41") == ["requeue", "requeue_hold"]  # retry 2: requeued, held
    assert h.scheduler.jobs["41"].held
    advice = await h.advice("41")
    assert advice[1]["release_at"] is not None
    assert any("retry backoff" in reason for reason in advice[1]["reasons"])

    await h.step(20)
    await h.engine.sweep()
    await h.recoveries()
    assert h.mutations("41") == ["requeue", "requeue_hold"]  # not yet

    await h.step(15)
    await h.engine.sweep()
    await h.recoveries()
    assert h.mutations("41") == ["requeue", "requeue_hold", "release"]
    assert not h.scheduler.jobs["41"].held
    assert [o["disposition"] for o in await h.outcomes("41")] == ["Converged", "Converged"]
