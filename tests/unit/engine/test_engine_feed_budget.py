"""A round feeds one workload's lines for at most ``tailing.FEED_BUDGET_S``; the rest waits in the
backlog and is fed first in the next rounds, in order (issue 28, goal 4: a 4,096-rank cascade must
not hold every other workload's lines back for the seconds its parsing takes)."""

from __future__ import annotations

import pytest

from tests.unit.engine import scenario
from trainguard.engine import tailing


async def test_a_batch_over_budget_is_fed_over_rounds_in_order(
    make_harness: scenario.MakeHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tailing, "FEED_BUDGET_S", 0.0)  # every 64th line ends the workload's turn
    h = await make_harness()
    h.submit("1")
    await h.step()
    h.write("1", *(f"step {n} | loss 2.0 | 100.0 samples/s" for n in range(200)),
            *scenario.ranked(0, scenario.XID_79))
    await h.step(0.1)
    assert h.engine.tailing.backlog  # the first round fed only part of the batch
    for _ in range(6):
        await h.step(0.3)
    assert not h.engine.tailing.backlog
    await h.settle()
    assert "anomaly" in await h.kinds("1")  # the crash line at the end was reached and judged
