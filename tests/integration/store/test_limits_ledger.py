"""The blast-radius ledger on SQLite, PostgreSQL and MariaDB: one limit decision at a time, across connections.

``AuditStore.reserve_limits`` is the limit check and the reservation of what it allows in one
transaction under the ledger row's lock (``store.ledger``). Two stores on the same database (two
replicas) decide eight generations concurrently under a limit of two: exactly two are allowed. A
reservation counts until its generation is closed, a generation that asks again gets its recorded
answer, a fenced decision with a superseded token is refused, and a blocking administrator's cap
latches the breaker once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from trainguard.act import switch
from trainguard.model import actions, advice, limits, vocab
from trainguard.store import audit, database, ledger

T0 = 1_800_000_000.5
WINDOW = 3600.0
PER_HOUR = 2


def workload(n: int) -> str:
    return f"slurm/test/{n}"


def an_advice(n: int) -> advice.Advice:
    return advice.Advice.model_validate({"workload": workload(n), "attempt": 0, "generation": 1, "action": "requeue",
                                         "mode": "Action", "deadline": T0 + 300, "policy": "default"})


def per_hour(maximum: int, *, cap: bool = False) -> ledger.Decide:
    """A decision like the engine's: count the window's operations and the reservations in flight."""

    async def decide(rows: Sequence[actions.ActionRecord], live: Sequence[ledger.Reservation]) -> ledger.Decision:
        await asyncio.sleep(0)  # another decision may run here if the store does not serialise them
        in_window = len({(r.workload, r.attempt, r.generation) for r in rows}) + sum(len(r.operations) for r in live)
        blocked = in_window + 1 > maximum
        check = limits.LimitCheck(limit=limits.CAP_ACTIONS_PER_HOUR if cap else limits.ACTIONS_PER_HOUR,
                                  maximum=maximum, planned=1, in_window=in_window, would_block=blocked, cap=cap,
                                  reason=f"{in_window} + 1 > {maximum}" if blocked else "")
        return ledger.Decision(limits.LimitReport(checks=[check]), ["requeue"], [])

    return decide


async def seeded(db_url: str, count: int) -> audit.AuditStore:
    store = await database.open_store(db_url)
    for n in range(count):
        await store.upsert_workload(workload=workload(n), scheduler="slurm", job_id=str(n), at=T0)
        await store.record_advice(an_advice(n), at=T0)
    return store


async def test_concurrent_decisions_from_two_replicas_allow_exactly_the_limit(db_url: str) -> None:
    one = await seeded(db_url, 8)
    two = await database.open_store(db_url)
    try:
        reports = await asyncio.gather(*(
            store.reserve_limits(workload(n), 0, 1, per_hour(PER_HOUR), at=T0 + 1, since=T0 + 1 - WINDOW)
            for n, store in zip(range(8), [one, two] * 4, strict=True)))
        assert sum(r.reason is None for r in reports) == PER_HOUR
        # An allowed generation that asks again (resumed after a restart) gets its recorded answer, even
        # under a limit that now refuses everything; a refused one was never recorded (its generation closes).
        allowed = [n for n, r in enumerate(reports) if r.reason is None]
        again = [await one.reserve_limits(workload(n), 0, 1, per_hour(0), at=T0 + 2, since=T0 + 2 - WINDOW)
                 for n in allowed]
        assert [r.reason for r in again] == [None] * PER_HOUR
    finally:
        await one.close()
        await two.close()


async def test_a_reservation_counts_until_its_generation_is_closed(db_url: str) -> None:
    store = await seeded(db_url, 3)
    try:
        first = await store.reserve_limits(workload(0), 0, 1, per_hour(1), at=T0 + 1, since=T0 + 1 - WINDOW)
        assert first.reason is None
        refused = await store.reserve_limits(workload(1), 0, 1, per_hour(1), at=T0 + 2, since=T0 + 2 - WINDOW)
        assert refused.reason == "1 + 1 > 1"  # the first one's reservation, before any action row of it
        await store.record_outcome(actions.OutcomeRecord(
            workload=workload(0), attempt=0, generation=1, disposition=vocab.Disposition.ABANDONED,
            detail="closed before any step", at=T0 + 3))
        after = await store.reserve_limits(workload(2), 0, 1, per_hour(1), at=T0 + 4, since=T0 + 4 - WINDOW)
        assert after.reason is None  # closed without an operation: nothing left to count
    finally:
        await store.close()


async def test_a_decision_fenced_with_a_superseded_token_is_refused(db_url: str) -> None:
    store = await seeded(db_url, 1)
    try:
        old = await store.claim_leadership("shard-0", "replica-a", at=T0)
        await store.claim_leadership("shard-0", "replica-b", at=T0 + 1)
        with pytest.raises(actions.FencedError):
            await store.reserve_limits(workload(0), 0, 1, per_hour(5), at=T0 + 2, since=T0 + 2 - WINDOW, fence=old)
        row = await store.control(ledger.LEDGER)
        assert row is None or row.value["reserved"] == []
    finally:
        await store.close()


async def test_a_blocking_cap_latches_the_breaker_once(db_url: str) -> None:
    store = await seeded(db_url, 3)
    try:
        assert (await store.reserve_limits(workload(0), 0, 1, per_hour(1, cap=True), at=T0 + 1,
                                           since=T0 + 1 - WINDOW, breaker=switch.BREAKER)).reason is None
        for n in (1, 2):
            report = await store.reserve_limits(workload(n), 0, 1, per_hour(1, cap=True), at=T0 + 1 + n,
                                                since=T0 + 1 + n - WINDOW, breaker=switch.BREAKER)
            assert report.breaker_reason == "1 + 1 > 1"
        blocked = await switch.ActionSwitch(True, store).blocked()
        assert blocked is not None and "breaker is open" in blocked
        opened = [r for r in await store.audit_records(kind=vocab.AuditKind.ACTION)
                  if r.payload.get("operation") == "breaker-open"]
        assert [(r.workload, r.payload["reason"]) for r in opened] == [(workload(1), "1 + 1 > 1")]
    finally:
        await store.close()
