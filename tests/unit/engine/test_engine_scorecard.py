"""The engine's scorecard watch: after a Monitor-mode advice it writes down what the scheduler shows
whenever that changes, so the scorecard still knows it after the scheduler forgot (a drain resumed, the
job purged)."""

from __future__ import annotations

import sqlalchemy as sa

from tests.unit.engine import scenario
from trainguard.model import workloads
from trainguard.observe import scorecard_facts
from trainguard.store import snapshots, tables


async def _rows(h: scenario.Harness) -> int:
    async with h.store.sql_engine.connect() as conn:
        return int((await conn.execute(sa.select(sa.func.count()).select_from(tables.ScorecardSnapshotRow))).scalar()
                   or 0)


async def test_the_watch_keeps_what_the_scheduler_forgets_and_the_scorecard_uses_it(
    make_harness: scenario.MakeHarness,
) -> None:
    h = await make_harness()
    h.submit("20", "trainguard")  # the default policy: Monitor
    h.write("20", *scenario.ranked(0, "iteration 1 loss 2.3"), *scenario.ranked(1, scenario.XID_79))
    await h.step()
    await h.settle()
    [advice] = await h.advice("20")
    assert (advice["mode"], advice["exclusions"]) == ("Monitor", ["node2"])
    watch = h.engine.scorecard_watch
    assert scenario.workload_of("20") in watch.watched

    await watch.sweep()
    await watch.sweep()  # nothing changed: nothing written
    assert await _rows(h) == 1

    # a person: drains the suspect node with their reason; the job fails
    node2 = h.scheduler.nodes["node2"]
    h.scheduler.nodes["node2"] = node2.model_copy(update={"state": "IDLE+DRAIN", "drained": True,
                                                          "reason": "admin: bad gpu"})
    h.fail("20")
    await watch.sweep()
    # then requeues it with node2 excluded and resumes node2; later Slurm purges the job
    h.scheduler.nodes["node2"] = node2
    h.change("20", attempt=1, state=workloads.JobState.RUNNING, excluded_nodes=["node2"], nodes=["node1", "node3"])
    await watch.sweep()
    del h.scheduler.jobs["20"]
    await watch.sweep()
    assert scenario.workload_of("20") not in watch.watched  # forgotten job: no more reads
    await watch.sweep()

    seen = (await snapshots.Snapshots(h.store.sql_engine).of([scenario.workload_of("20")]))[scenario.workload_of("20")]
    assert [(s.job_state, s.restarts, s.excluded_nodes) for s in seen] == [
        ("RUNNING", 0, ()), ("FAILED", 0, ()), ("RUNNING", 1, ("node2",)), ("GONE", None, ())]
    assert seen[1].nodes == {"node2": {"state": "IDLE+DRAIN", "reason": "admin: bad gpu"}}

    # The scheduler now knows neither the job nor the drain; the snapshots still tell the story.
    [row] = await scorecard_facts.gather(h.store, h.scheduler)
    data = row.to_json()
    assert (data["score"], data["detail"], data["requeued_by"]) == ("agree", "requeued-excluding-suspect", "person")
    assert data["drained_by_other"] == {"node2": "admin: bad gpu"}
    assert h.scheduler.mutating_calls() == []


async def test_a_restarted_engine_watches_the_recorded_monitor_advice_again(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness()
    h.submit("21", "trainguard")
    h.write("21", *scenario.ranked(1, scenario.XID_79))
    await h.step()
    await h.settle()
    assert await h.advice("21")

    fresh = h.new_engine()  # a restart: nothing in memory
    assert fresh.scorecard_watch.watched == {}
    h.fail("21")
    await fresh.scorecard_watch.sweep()
    seen = await snapshots.Snapshots(h.store.sql_engine).of([scenario.workload_of("21")])
    assert [s.job_state for s in seen[scenario.workload_of("21")]] == ["FAILED"]


async def test_the_watch_is_counted_in_the_metrics(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness()
    h.submit("22", "trainguard")
    h.write("22", *scenario.ranked(1, scenario.XID_79))
    await h.step()
    await h.settle()
    await h.engine.scorecard_watch.sweep()
    h.fail("22")
    await h.engine.scorecard_watch.sweep()
    registry = h.engine.metrics.registry
    assert registry.get_sample_value("trainguard_scorecard_watched_workloads") == 1
    assert registry.get_sample_value("trainguard_scorecard_snapshots_total", {"job_state": "RUNNING"}) == 1
    assert registry.get_sample_value("trainguard_scorecard_snapshots_total", {"job_state": "FAILED"}) == 1


async def test_a_new_engine_on_the_same_store_replaces_the_previous_watch(make_harness: scenario.MakeHarness) -> None:
    """The operator starts an engine per leadership term on one store: the old watch must not keep
    collecting advice it will never sweep."""
    h = await make_harness()
    fresh = h.new_engine()
    watches = [o for o in h.store.observers if isinstance(o, type(fresh.scorecard_watch))]
    assert watches == [fresh.scorecard_watch]
