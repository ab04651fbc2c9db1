"""Goodput from what the engine itself records: a crash after a checkpoint, our requeue, a completed rerun.

The engine writes the audit store (a real SQLite file); goodput accounting reads it back. The
split must agree with the audit records' own timestamps, and the work lost must start at the
checkpoint line, which needs the engine to record when that line was read (migration 0009).
"""

from __future__ import annotations

from tests.unit.engine import scenario
from trainguard.model import vocab, workloads
from trainguard.observe import goodput
from trainguard.store import goodput as facts_mod


async def test_goodput_of_a_crash_requeue_and_completion(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness()
    h.submit("40")
    await h.step()
    h.write("40", *scenario.ranked(0, "iteration 100 loss 2.0", "saved checkpoint to /ckpt/iter_100"))
    await h.step(100)
    checkpoint_at = h.clock.now()
    h.write("40", *scenario.ranked(0, "iteration 150 loss 1.9"), *scenario.ranked(1, *scenario.TRACEBACK))
    await h.step(50)
    onset = h.clock.now()
    await h.settle()
    assert h.mutations("40") == ["requeue"]
    await h.step(20)  # attempt 1 seen pending
    h.scheduler.start("40", ["node3", "node4"])
    await h.step(30)
    restart = h.clock.now()
    h.change("40", state=workloads.JobState.COMPLETED)
    await h.step(200)

    found = goodput.account(await facts_mod.attempt_facts(h.store.sql_engine), now=h.clock.now())
    first, second = sorted(found, key=lambda a: a.attempt)
    failure = first.failure
    assert failure is not None and second.failure is None
    anomaly = (await h.records("40", vocab.AuditKind.ANOMALY))[0]
    advice = (await h.records("40", vocab.AuditKind.ADVICE))[0]
    requeue = next(r for r in await h.records("40", vocab.AuditKind.ACTION)
                   if r.payload.get("operation") in ("requeue", "requeue_hold"))

    assert failure.checkpoint_basis == "checkpoint_line"
    assert failure.work_lost_s == onset - checkpoint_at == 50
    assert failure.detection_s == anomaly.time.timestamp() - onset
    assert failure.decision_s == advice.time.timestamp() - anomaly.time.timestamp()
    assert failure.action_s == requeue.time.timestamp() - advice.time.timestamp()
    assert failure.requeue_wait_s == restart - requeue.time.timestamp()
    assert (failure.requeued_by, failure.recovered, failure.estimate) == ("trainguard", True, "job_exit")
    assert first.productive_s == checkpoint_at - scenario.START
    assert first.productive_s + failure.lost_s == restart - scenario.START
    assert second.productive_s == 200
