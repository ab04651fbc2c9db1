"""Fencing of scheduler mutations on leadership: a replica that lost it stops before the scheduler.

Two executors share one real SQLite audit store (as two operator replicas share one database) and
the in-memory FakeScheduler; each has the token of its own claim (``AuditStore.claim_leadership``).
"""

from __future__ import annotations

from tests.support import fake_scheduler
from trainguard.act import executor
from trainguard.model import actions, clock, vocab
from trainguard.store import audit

JOB_ID = "42"
WORKLOAD = "slurm/test/42"
LEASE = "trainguard"


class Token:
    """A Fence whose token the test sets; ``lost`` makes it refuse like a Lease that was not renewed."""

    def __init__(self, token: actions.FenceToken) -> None:
        self.value = token
        self.lost = False

    def token(self, workload: str = "") -> actions.FenceToken:
        if self.lost:
            raise actions.FencedError(f"{self.value.describe()}: lease lost")
        return self.value


def ops(scheduler: fake_scheduler.FakeScheduler) -> list[str]:
    return [m["operation"] for m in scheduler.mutations]


async def test_claims_count_up_and_the_latest_is_current(store: audit.AuditStore, manual_clock: clock.ManualClock):
    first = await store.claim_leadership(LEASE, "replica-a", at=manual_clock.now())
    second = await store.claim_leadership(LEASE, "replica-b", at=manual_clock.now())
    third = await store.claim_leadership(LEASE, "replica-a", at=manual_clock.now())
    assert [t.term for t in (first, second, third)] == [1, 2, 3]
    assert await store.leadership(LEASE) == third
    assert await store.leadership("other") is None


async def test_a_superseded_leader_touches_nothing_and_leaves_the_generation_pending(
        scheduler, store, manual_clock, advise):
    old = await store.claim_leadership(LEASE, "replica-a", at=manual_clock.now())
    await store.claim_leadership(LEASE, "replica-b", at=manual_clock.now())
    stale = executor.Executor(scheduler, store, manual_clock, fence=Token(old))

    disposition = await stale.reconcile(advise(vocab.AdviceAction.REQUEUE, exclude_nodes=["node2"]))

    assert disposition is vocab.Disposition.PENDING
    assert scheduler.mutating_calls() == []
    assert await store.actions_for(WORKLOAD, 0, 1) == []
    assert await store.get_outcome(WORKLOAD, 0, 1) is None  # the new leader resumes it
    notes = await store.audit_records(workload=WORKLOAD, kind=vocab.AuditKind.WATCHDOG)
    assert len(notes) == 1 and notes[0].payload["fenced"] is True
    assert "replica-b (term 2)" in str(notes[0].payload["reason"])


async def test_leadership_lost_between_two_steps_hands_the_rest_to_the_new_leader(
        scheduler, store, manual_clock, advise):
    """A holds the Lease and has requeued-held the job when B claims: A's next step is refused, B
    resumes the same generation, and every step happens exactly once."""
    a = Token(await store.claim_leadership(LEASE, "replica-a", at=manual_clock.now()))
    tokens: list[actions.FenceToken] = []

    def handover() -> None:  # runs inside A's requeue_hold, after it took effect
        a.lost = True

    scheduler.after["requeue_hold"] = handover
    item = advise(vocab.AdviceAction.REQUEUE, exclude_nodes=["node2"])
    assert await executor.Executor(scheduler, store, manual_clock, fence=a).reconcile(item) \
        is vocab.Disposition.PENDING
    assert ops(scheduler) == ["requeue_hold"]
    assert scheduler.jobs[JOB_ID].held  # held by us: the new leader must finish or release it

    tokens.append(await store.claim_leadership(LEASE, "replica-b", at=manual_clock.now()))
    b = executor.Executor(scheduler, store, manual_clock, fence=Token(tokens[0]))
    assert await b.reconcile(item) is vocab.Disposition.CONVERGED

    assert ops(scheduler) == ["requeue_hold", "exclude_nodes", "release"]
    rows = {r.step: r for r in await store.actions_for(WORKLOAD, 0, 1)}
    assert rows["requeue_hold"].fence == "replica-a@trainguard#1"
    assert rows["exclude_nodes"].fence == rows["release"].fence == "replica-b@trainguard#2"
    # A stale token of A, used again now, is refused by the store itself.
    again = executor.Executor(scheduler, store, manual_clock, fence=Token(a.value))
    assert await again.reconcile(advise(vocab.AdviceAction.HOLD, generation=2)) is vocab.Disposition.PENDING
    assert ops(scheduler) == ["requeue_hold", "exclude_nodes", "release"]


async def test_an_intent_begun_by_the_old_leader_is_taken_over_with_the_new_token(
        scheduler, store, manual_clock, advise):
    """A committed its intent and lost the Lease before calling the scheduler: B carries the step out
    once, and the stream shows whose intent it took over."""
    a = Token(await store.claim_leadership(LEASE, "replica-a", at=manual_clock.now()))

    async def intent_then_lost() -> None:
        item = advise(vocab.AdviceAction.REQUEUE)
        await store.record_advice(item, at=manual_clock.now())
        await store.begin_action(actions.ActionRecord(
            workload=WORKLOAD, attempt=0, generation=1, step="requeue", operation=actions.Operation.REQUEUE,
            args={"job_id": JOB_ID}), at=manual_clock.now(), fence=a.token())

    await intent_then_lost()
    b = Token(await store.claim_leadership(LEASE, "replica-b", at=manual_clock.now()))
    assert await executor.Executor(scheduler, store, manual_clock, fence=b).reconcile(
        advise(vocab.AdviceAction.REQUEUE)) is vocab.Disposition.CONVERGED

    assert ops(scheduler) == ["requeue"]
    records = [r.payload for r in await store.audit_records(workload=WORKLOAD, kind=vocab.AuditKind.ACTION)]
    assert [(p["status"], p.get("fence"), p.get("resumed_from")) for p in records] == [
        ("intent", "replica-a@trainguard#1", None),
        ("intent", "replica-b@trainguard#2", "replica-a@trainguard#1"),
        ("done", "replica-b@trainguard#2", None),
    ]


async def test_a_fenced_watchdog_neither_releases_nor_closes(scheduler, store, manual_clock, advise):
    a = Token(await store.claim_leadership(LEASE, "replica-a", at=manual_clock.now()))
    def lose() -> None:
        a.lost = True

    scheduler.after["requeue_hold"] = lose
    item = advise(vocab.AdviceAction.REQUEUE, exclude_nodes=["node2"])
    assert await executor.Executor(scheduler, store, manual_clock, fence=a).reconcile(item) \
        is vocab.Disposition.PENDING
    manual_clock.advance(3600)  # far past the deadline: a leader's watchdog would release now
    assert await executor.Executor(scheduler, store, manual_clock, fence=a).watchdog.sweep() == []
    assert ops(scheduler) == ["requeue_hold"]
    assert await store.get_outcome(WORKLOAD, 0, 1) is None
