"""Leadership claims and fenced action intents on SQLite, PostgreSQL and MariaDB (migration 0003)."""

from __future__ import annotations

import asyncio

import pytest

from trainguard.model import actions, advice, vocab
from trainguard.store import database

T0 = 1_800_000_000.5
W = "slurm/test/8"
LEASE = "trainguard"


def an_advice() -> advice.Advice:
    return advice.Advice.model_validate({"workload": W, "attempt": 0, "generation": 1, "action": "requeue",
                                         "mode": "Action", "deadline": T0 + 300, "policy": "default"})


def an_action(step: str) -> actions.ActionRecord:
    return actions.ActionRecord(workload=W, attempt=0, generation=1, step=step,
                                operation=actions.Operation.REQUEUE, args={"job_id": "8"})


async def test_an_intent_with_a_superseded_token_is_refused_and_nothing_is_written(db_url: str):
    store = await database.open_store(db_url)
    try:
        await store.upsert_workload(workload=W, scheduler="slurm", job_id="8", at=T0)
        await store.record_advice(an_advice(), at=T0)
        a = await store.claim_leadership(LEASE, "replica-a", at=T0)
        first = await store.begin_action(an_action("one"), at=T0 + 1, fence=a)
        assert first.fence == "replica-a@trainguard#1"
        b = await store.claim_leadership(LEASE, "replica-b", at=T0 + 2)
        assert (b.term, await store.leadership(LEASE)) == (2, b)

        with pytest.raises(actions.FencedError, match=r"replica-b \(term 2\)"):
            await store.begin_action(an_action("two"), at=T0 + 3, fence=a)
        with pytest.raises(actions.FencedError):  # not even an existing intent is handed back
            await store.begin_action(an_action("one"), at=T0 + 3, fence=a)
        assert [r.step for r in await store.actions_for(W, 0, 1)] == ["one"]

        resumed = await store.begin_action(an_action("one"), at=T0 + 4, fence=b)
        assert (resumed.status, resumed.fence) == (actions.ActionStatus.INTENT, "replica-b@trainguard#2")
        payloads = [r.payload for r in await store.audit_records(kind=vocab.AuditKind.ACTION)]
        assert [(p["step"], p["fence"], p.get("resumed_from")) for p in payloads] == [
            ("one", "replica-a@trainguard#1", None), ("one", "replica-b@trainguard#2", "replica-a@trainguard#1")]
        assert (await store.begin_action(an_action("plain"), at=T0 + 5)).fence == ""  # standalone: no check
    finally:
        await store.close()


async def test_concurrent_claims_from_two_connections_get_distinct_increasing_terms(db_url: str):
    one, two = await database.open_store(db_url), await database.open_store(db_url)
    try:
        tokens = await asyncio.gather(*(store.claim_leadership(LEASE, f"r{i}", at=T0)
                                        for i, store in enumerate([one, two, one, two])))
        assert sorted(t.term for t in tokens) == [1, 2, 3, 4]
        latest = await one.leadership(LEASE)
        assert latest is not None and latest.term == 4
    finally:
        await one.close()
        await two.close()


async def test_a_claim_racing_fenced_intents_never_lets_an_old_term_write_after_it(db_url: str):
    """Each round: replica A begins an intent with its token while B claims. Either A's intent
    committed before B's claim (and B sees it when it resumes), or it was refused; never both."""
    a_store, b_store = await database.open_store(db_url), await database.open_store(db_url)
    try:
        await a_store.upsert_workload(workload=W, scheduler="slurm", job_id="8", at=T0)
        await a_store.record_advice(an_advice(), at=T0)
        token = await a_store.claim_leadership(LEASE, "replica-a", at=T0)
        for round_ in range(5):
            step = f"step-{round_}"
            begun, claimed = await asyncio.gather(a_store.begin_action(an_action(step), at=T0, fence=token),
                                                  b_store.claim_leadership(LEASE, "replica-b", at=T0),
                                                  return_exceptions=True)
            assert isinstance(claimed, actions.FenceToken)
            rows = {r.step: r for r in await b_store.actions_for(W, 0, 1)}
            if isinstance(begun, actions.FencedError):
                assert step not in rows
            else:
                assert isinstance(begun, actions.ActionRecord) and rows[step].fence == token.describe()
            with pytest.raises(actions.FencedError):  # after the claim, A's token is dead for good
                await a_store.begin_action(an_action(f"late-{round_}"), at=T0, fence=token)
            token = await a_store.claim_leadership(LEASE, "replica-a", at=T0)
    finally:
        await a_store.close()
        await b_store.close()
