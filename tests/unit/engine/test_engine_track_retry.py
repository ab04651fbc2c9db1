"""A job whose tracking failed (e.g. the audit store timed out under load) is tracked in a later round.

Found with benchmarks/scale.py on PostgreSQL under heavy load: the second batch of 1,000 new jobs
failed to be tracked once, discovery kept them as known, and they were never tracked (512 of 1,000
for the whole run) — silently unmonitored.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.engine import scenario


async def test_a_job_whose_tracking_failed_once_is_tracked_in_the_next_round(
    make_harness: scenario.MakeHarness, monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = await make_harness()
    h.submit("80")
    h.submit("81")
    real = h.store.upsert_workload
    failures = {scenario.workload_of("81")}

    async def flaky(**fields: Any) -> None:
        if fields["workload"] in failures:
            failures.discard(fields["workload"])
            raise TimeoutError("QueuePool limit reached, connection timed out")
        await real(**fields)

    monkeypatch.setattr(h.store, "upsert_workload", flaky)
    with pytest.raises(TimeoutError):
        await h.engine.discover()
    assert set(h.engine.runtimes) == {scenario.workload_of("80")}  # the other job is tracked all the same

    await h.step(1)
    assert set(h.engine.runtimes) == {scenario.workload_of("80"), scenario.workload_of("81")}
    h.write("81", scenario.XID_79)
    await h.step()
    await h.settle()
    assert await h.advice("81"), "the job tracked late is monitored like any other"
