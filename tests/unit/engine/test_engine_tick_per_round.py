"""The tailing round runs a workload's time-driven checks (``WorkloadDetector.tick``) once, after
feeding all the lines it read, not after every line as well: at thousands of workloads writing
many lines each, the per-line checks were about half of the engine's time."""

from __future__ import annotations

import pytest

from tests.unit.engine import scenario
from trainguard.detect import stream


async def test_one_tick_per_workload_per_round_whatever_the_lines(
    make_harness: scenario.MakeHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = await make_harness()
    h.submit("1")
    await h.step()
    ticks: list[int] = []
    real_tick = stream.WorkloadDetector.tick

    def counting_tick(self: stream.WorkloadDetector) -> list[object]:
        ticks.append(1)
        return real_tick(self)  # type: ignore[return-value]

    monkeypatch.setattr(stream.WorkloadDetector, "tick", counting_tick)
    h.write("1", *(f"step {n} | loss 2.0 | 100.0 samples/s" for n in range(200)))
    await h.step(1.0)
    assert len(ticks) == 1


async def test_a_crash_in_a_batch_is_still_concluded_by_the_round(make_harness: scenario.MakeHarness) -> None:
    """Feeding without ticking loses nothing: the crash window opened by a line of the batch is
    concluded by the round's tick once it has settled."""
    h = await make_harness()
    h.submit("1")
    await h.step()
    h.write("1", "step 1 | loss 2.0 | 100.0 samples/s", *scenario.ranked(0, scenario.XID_79),
            "step 2 | loss 2.0 | 100.0 samples/s")
    await h.step(1.0)
    await h.settle()
    assert "anomaly" in await h.kinds("1")
