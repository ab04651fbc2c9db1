"""A workload id used again by a new object is a new incarnation: its failures are judged on their
own, not as attempts its predecessor already had advised.

Where the scheduler tells objects apart (``JobSnapshot.incarnation``: a Kubernetes object's uid,
for a JobSet deleted and created again under its name), the predecessor's history moves to a
retired id and the newcomer starts afresh, whether the engine saw the old one go or not. Slurm
gives no such identity (a job id reused after the controller's state was reset): not covered
here, see docs/kubernetes-workloads.md."""

from __future__ import annotations

from tests.unit.engine import scenario
from trainguard.model import vocab, workloads


async def fail_with_an_xid(h: scenario.Harness, job_id: str) -> None:
    h.write(job_id, *scenario.ranked(1, scenario.XID_79))
    await h.step(1)
    await h.settle()


async def first_incarnation_recovered_then_gone(h: scenario.Harness, **fields: str) -> None:
    h.submit("90", comment="trainguard", **fields)  # the Monitor policy: advice only, the job stays as it is
    await h.step()
    await fail_with_an_xid(h, "90")
    assert [a["attempt"] for a in await h.advice("90")] == [0]
    h.change("90", state=workloads.JobState.FAILED, exit_code=1)
    await h.step(1)
    await h.step(60)  # past finished_grace_s: forgotten by the engine, kept by the store
    del h.scheduler.jobs["90"]
    await h.step(1)
    h.output("90").unlink()  # the newcomer writes its own output from its first byte


async def test_a_new_object_under_a_known_id_is_judged_on_its_own(make_harness: scenario.MakeHarness) -> None:
    h = await make_harness(finished_grace_s=30.0)
    await first_incarnation_recovered_then_gone(h, incarnation="uid-a")

    h.submit("90", comment="trainguard", incarnation="uid-b")  # attempt 0 again
    await h.step(1)
    await fail_with_an_xid(h, "90")
    newcomer = await h.store.attempt_facts(scenario.workload_of("90"))
    assert [(f.attempt, [g for g, _, _ in f.advice]) for f in newcomer] == [(0, [1])]
    retired = f"{scenario.workload_of('90')}@uid-a"
    assert [(f.attempt, [g for g, _, _ in f.advice]) for f in await h.store.attempt_facts(retired)] == [(0, [1])]
    # the audit log keeps both under the id, and the retirement between them
    kinds = await h.kinds("90")
    assert kinds.count("anomaly") == 2 and kinds.count("advice") == 2 and "watchdog" in kinds


async def test_a_new_object_seen_while_the_old_one_is_still_tracked_replaces_it(
        make_harness: scenario.MakeHarness) -> None:
    """Deleted and created again between two discovery rounds: the engine never saw the old one go."""
    h = await make_harness()
    h.submit("91", comment="trainguard", incarnation="uid-a")
    await h.step()
    await fail_with_an_xid(h, "91")
    h.output("91").unlink()
    h.change("91", incarnation="uid-b", attempt=0)
    await h.step(1)
    assert h.runtime("91").job.incarnation == "uid-b"
    await fail_with_an_xid(h, "91")
    advice = await h.records("91", vocab.AuditKind.ADVICE)
    assert [r.attempt for r in advice] == [0, 0]
    assert await h.store.get_advice(f"{scenario.workload_of('91')}@uid-a", 0, 1) is not None


async def test_a_tailing_round_that_began_before_the_replacement_leaves_the_new_objects_positions_alone(
        make_harness: scenario.MakeHarness) -> None:
    """A tailing round lists the runtimes it reads when it begins and awaits often (file reads, its
    yields, decisions); the old object's runtime, closed meanwhile, must not be fed or saved. Saved,
    its read position lands under the id after the retirement, where the newcomer resumes from
    it after a restart of ours (the CI run of stop 30: the new JobSet's Xid line went unread)."""
    h = await make_harness()
    wid = scenario.workload_of("92")
    h.submit("92", comment="trainguard", incarnation="uid-a")
    await h.step()
    h.write("92", *scenario.ranked(0, "iteration 1 loss 2.0", "iteration 2 loss 1.9", "iteration 3 loss 1.8"))
    await h.step(1)
    old = h.runtime("92")
    h.output("92").unlink()
    h.change("92", incarnation="uid-b", attempt=0)
    await h.step(1)
    assert h.runtime("92") is not old and old.closed
    newcomer = [(p.attempt, p.lineno) for p in await h.store.tail_positions(wid)]
    assert all(lineno < 3 for _, lineno in newcomer), newcomer

    await h.engine.placement.save([old], force=True)  # the end of a round that listed it first
    assert [(p.attempt, p.lineno) for p in await h.store.tail_positions(wid)] == newcomer
