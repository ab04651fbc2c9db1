"""Tracking many new jobs in one discovery round: their store writes share commits (the round
costs a few transactions, not three per job), and the result is the same as one by one."""

from __future__ import annotations

import sqlalchemy as sa

from tests.unit.engine import scenario


async def test_many_new_jobs_are_tracked_with_a_few_commits(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness()
    jobs = [str(i) for i in range(40)]
    for job_id in jobs:
        h.submit(job_id, nodes=("node1", "node2"))
        h.write(job_id, "step 1")
    commits = [0]

    def on_commit(_connection: object) -> None:
        commits[0] += 1

    sa.event.listen(h.store.sql_engine.sync_engine, "commit", on_commit)
    await h.engine.discover()
    assert commits[0] <= 6  # 3 writes per job (workload, read positions, allocation) before: 120
    assert list(h.engine.runtimes) == [scenario.workload_of(j) for j in jobs]  # the scheduler's order
    assert all(rt.ready for rt in h.engine.runtimes.values())
    for job_id in (jobs[0], jobs[-1]):
        record = await h.store.get_workload(scenario.workload_of(job_id))
        assert record is not None and record.job_id == job_id
        assert await h.store.allocation(scenario.workload_of(job_id)) == ["node1", "node2"]

    h.write("7", *scenario.ranked(0, scenario.XID_79))
    await h.step(1.0)
    await h.settle()
    assert "anomaly" in await h.kinds("7")
