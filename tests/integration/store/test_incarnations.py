"""A new object under a used workload id (a JobSet deleted and created again under its name): the
store moves the predecessor's history to a retired id, on every backend, and keeps the audit log."""

from __future__ import annotations

from tests.integration.store.test_audit_store import T0, W, an_action, an_advice
from trainguard.model import vocab
from trainguard.store import audit, database


async def test_a_new_incarnation_retires_the_old_history_and_closes_its_open_recoveries(db_url: str) -> None:
    store = await database.open_store(db_url)
    try:
        await store.upsert_workload(workload=W, scheduler="kubernetes", job_id=W, at=T0, incarnation="uid-a")
        await store.record_attempt(workload=W, attempt=0, at=T0, started_at=T0, nodes=["n1", "n2"])
        await store.record_advice(an_advice(), at=T0 + 1)
        await store.begin_action(an_action(), at=T0 + 2)
        await store.save_tail_positions([audit.TailRecord(workload=W, attempt=0, path="k8s://ns/JobSet/x",
                                                          source="stdout", inode=None, offset=10, lineno=2)], at=T0)
        # the same object again, or the first time an incarnation is known: nothing to retire
        assert await store.retire_incarnation(W, incarnation="uid-a", at=T0 + 3) is None
        assert await store.retire_incarnation("never/seen", incarnation="uid-z", at=T0 + 3) is None

        retired = await store.retire_incarnation(W, incarnation="uid-b", at=T0 + 10)
        assert retired == f"{W}@uid-a"
        assert await store.attempt_facts(W) == [] and await store.tail_positions(W) == []
        assert await store.allocation(W) == [] and await store.pending_advice() == []
        assert [f.attempt for f in await store.attempt_facts(retired)] == [0]
        assert await store.allocation(retired) == ["n1", "n2"]
        assert [r.offset for r in await store.tail_positions(retired)] == [10]
        outcome = await store.get_outcome(retired, 0, 1)
        assert outcome is not None and outcome.disposition is vocab.Disposition.ABANDONED
        assert (await store.get_advice(retired, 0, 1) or an_advice()).workload == retired
        now = await store.get_workload(W)
        assert now is not None and now.incarnation == "uid-b"
        old = await store.get_workload(retired)
        assert old is not None and (old.incarnation, old.job_id) == ("uid-a", W)

        # the audit log is never rewritten: the old records stay under W, with the retirement beside them
        kinds = [r.kind for r in await store.audit_records(workload=W)]
        assert kinds[:2] == [vocab.AuditKind.ADVICE, vocab.AuditKind.ACTION]
        assert vocab.AuditKind.OUTCOME in kinds
        [note] = await store.audit_records(workload=W, kind=vocab.AuditKind.WATCHDOG)
        assert note.payload["retired_as"] == retired and note.payload["previous_incarnation"] == "uid-a"

        # the newcomer's first advice takes the key the old one had
        assert await store.record_advice(an_advice(), at=T0 + 20) is True
        assert [a.workload for a in await store.pending_advice()] == [W]
    finally:
        await store.close()
