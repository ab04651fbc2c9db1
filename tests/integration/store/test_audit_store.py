"""The audit store against real SQLite and real PostgreSQL: schema, idempotence keys, the stream."""

from __future__ import annotations

import asyncio
import datetime
import re

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import exc as sa_exc

from trainguard.model import actions, advice, anomalies, verdicts, vocab
from trainguard.store import audit, database, tables, tails

T0 = 1_800_000_000.123456
W = "slurm/test/7"
ISO_MICRO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00$")


def an_advice(generation: int = 1, **fields: object) -> advice.Advice:
    return advice.Advice.model_validate({
        "workload": W, "attempt": 0, "generation": generation, "action": "requeue", "exclude_nodes": ["n2"],
        "reasons": ["hardware verdict on n2"], "mode": "Action", "deadline": T0 + 300, "policy": "default",
        **fields,
    })


def an_action(step: str = "requeue_hold", generation: int = 1) -> actions.ActionRecord:
    return actions.ActionRecord(workload=W, attempt=0, generation=generation, step=step,
                                operation=actions.Operation.REQUEUE_HOLD, args={"job_id": "7"})


async def test_migrations_build_the_models_schema_and_rerun_cleanly(db_url: str):
    first = await database.open_store(db_url)
    await first.close()
    store = await database.open_store(db_url)  # a second start: upgrade head is a no-op
    try:
        async with store._engine.connect() as conn:
            def diff(sync_conn: sa.Connection) -> list[object]:
                context = MigrationContext.configure(sync_conn, opts={"compare_type": True})
                return list(compare_metadata(context, tables.Base.metadata))

            assert await conn.run_sync(diff) == []
    finally:
        await store.close()


async def test_sqlite_file_gets_its_folder_wal_and_foreign_keys(db_url: str):
    if not db_url.startswith("sqlite"):
        pytest.skip("SQLite only")
    store = await database.open_store(db_url)
    try:
        assert database.sqlite_path(sa.make_url(db_url)).is_file()
        async with store._engine.connect() as conn:
            assert (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar() == "wal"
            assert (await conn.exec_driver_sql("PRAGMA foreign_keys")).scalar() == 1
    finally:
        await store.close()


async def test_advice_is_written_once_per_key(db_url: str):
    store = await database.open_store(db_url, context=audit.AuditContext("p1", "c1", "f1"))
    try:
        assert await store.record_advice(an_advice(), at=T0) is True
        assert await store.record_advice(an_advice(reasons=["changed"]), at=T0 + 1) is False
        assert await store.record_advice(an_advice(generation=2), at=T0 + 2) is True
        assert await store.get_advice(W, 0, 1) == an_advice()
        assert [a.generation for a in await store.pending_advice()] == [1, 2]
        records = await store.audit_records(kind=vocab.AuditKind.ADVICE)
        assert [r.payload["generation"] for r in records] == [1, 2]
        line = records[0].to_json()
        assert line["time"] == "2027-01-15T08:00:00.123456+00:00"
        assert ISO_MICRO_UTC.match(line["time"])
        assert (line["payload"]["action"], line["payload"]["exclusions"]) == ("requeue", ["n2"])
        assert (line["policy_version"], line["catalog_version"], line["settings_fingerprint"]) == ("p1", "c1", "f1")
    finally:
        await store.close()


async def test_concurrent_writers_of_one_advice_key_write_it_once(db_url: str):
    one, two = await database.open_store(db_url), await database.open_store(db_url)
    try:
        results = await asyncio.gather(one.record_advice(an_advice(), at=T0), two.record_advice(an_advice(), at=T0))
        assert sorted(results) == [False, True]
        assert len(await one.audit_records(kind=vocab.AuditKind.ADVICE)) == 1
    finally:
        await one.close()
        await two.close()


async def test_action_intent_is_unique_and_the_first_result_wins(db_url: str):
    store = await database.open_store(db_url)
    try:
        with pytest.raises(LookupError, match="advice is written before any action"):
            await store.begin_action(an_action(), at=T0)
        await store.record_advice(an_advice(), at=T0)
        intent = await store.begin_action(an_action(), at=T0 + 1)
        again = await store.begin_action(an_action().model_copy(update={"args": {"job_id": "other"}}), at=T0 + 2)
        assert intent == again and again.status is actions.ActionStatus.INTENT
        done = await store.finish_action(workload=W, attempt=0, generation=1, step="requeue_hold",
                                         status=actions.ActionStatus.DONE, at=T0 + 3)
        late = await store.finish_action(workload=W, attempt=0, generation=1, step="requeue_hold",
                                         status=actions.ActionStatus.FAILED, error="late", at=T0 + 4)
        assert done.status is late.status is actions.ActionStatus.DONE
        assert await store.actions_for(W, 0, 1) == [done]
        statuses = [r.payload["status"] for r in await store.audit_records(kind=vocab.AuditKind.ACTION)]
        assert statuses == ["intent", "done"]
        holds = await store.actions_by_operation([actions.Operation.REQUEUE_HOLD], since=T0)
        assert [h.step for h in holds] == ["requeue_hold"]
    finally:
        await store.close()


async def test_the_database_itself_rejects_a_second_intent_for_a_key(db_url: str):
    store = await database.open_store(db_url)
    try:
        await store.record_advice(an_advice(), at=T0)
        await store.begin_action(an_action(), at=T0)
        when = datetime.datetime.fromtimestamp(T0, datetime.UTC)
        with pytest.raises(sa_exc.IntegrityError):
            async with store._engine.begin() as conn:
                advice_id = (await conn.execute(sa.select(tables.AdviceRow.id))).scalar_one()
                await conn.execute(sa.insert(tables.ActionRow).values(
                    advice_id=advice_id, workload=W, attempt=0, generation=1, step="requeue_hold",
                    operation="requeue_hold", args={}, status="intent", error="", decided_by="policy-engine",
                    created_at=when, updated_at=when))
    finally:
        await store.close()


async def test_outcome_closes_a_generation_once(db_url: str):
    store = await database.open_store(db_url)
    try:
        await store.record_advice(an_advice(), at=T0)
        first = actions.OutcomeRecord(workload=W, attempt=0, generation=1, disposition=vocab.Disposition.CONVERGED,
                                      detail="verified", at=T0 + 5)
        assert await store.record_outcome(first) == first
        second = first.model_copy(update={"disposition": vocab.Disposition.ABANDONED})
        assert await store.record_outcome(second) == first
        assert await store.get_outcome(W, 0, 1) == first
        assert await store.pending_advice() == []
        await store.record_watchdog(workload=W, attempt=0, generation=1, payload={"reason": "r"}, at=T0 + 6)
        kinds = [r.kind.value for r in await store.audit_records(workload=W)]
        assert kinds == ["advice", "outcome", "watchdog"]
    finally:
        await store.close()


async def test_anomaly_verdict_and_node_history_carry_the_contract_fields(db_url: str):
    store = await database.open_store(db_url)
    try:
        evidence = anomalies.Evidence(line=12, text="Xid 79: GPU has fallen off the bus", pattern="xid.79",
                                      node="n2", category=vocab.Category.GPU_FALLEN_OFF_BUS)
        anomaly = anomalies.Anomaly(symptom=vocab.Symptom.CRASH, category=vocab.Category.GPU_FALLEN_OFF_BUS,
                                    evidence=[evidence], suspect_nodes=["n2"])
        verdict = verdicts.Verdict(attribution=vocab.Attribution.HARDWARE,
                                   category=vocab.Category.GPU_FALLEN_OFF_BUS, suspect_nodes=["n2"])
        await store.record_attempt(workload=W, attempt=0, at=T0, nodes=["n1", "n2"])
        await store.record_anomaly(workload=W, attempt=0, anomaly=anomaly, at=T0)
        await store.record_verdict(workload=W, attempt=0, verdict=verdict, at=T0 + 1)
        record_a, record_v = await store.audit_records(workload=W)
        assert record_a.payload["category"] == "gpu_fallen_off_bus"
        assert record_a.payload["suspect_nodes"] == ["n2"]
        assert record_a.payload["evidence"][0]["pattern"] == "xid.79"
        assert (record_v.payload["attribution"], record_v.payload["nodes"]) == ("hardware", ["n2"])
        history = await store.node_history(since=T0)
        assert [(h.node, h.workload, h.attempt, h.category) for h in history] == [
            ("n2", W, 0, "gpu_fallen_off_bus")]
    finally:
        await store.close()


async def test_application_failures_do_not_feed_lemon_node_memory(db_url: str):
    """A user bug that always kills the same rank must not make that rank's node a lemon."""
    store = await database.open_store(db_url)
    try:
        app = verdicts.Verdict(attribution=vocab.Attribution.APPLICATION,
                               category=vocab.Category.PYTHON_EXCEPTION, suspect_nodes=["n3"])
        unknown = verdicts.Verdict(attribution=vocab.Attribution.UNKNOWN,
                                   category=vocab.Category.PROCESS_SIGNAL_KILLED, suspect_nodes=["n4"])
        await store.record_attempt(workload=W, attempt=0, at=T0, nodes=["n3", "n4"])
        await store.record_verdict(workload=W, attempt=0, verdict=app, at=T0)
        await store.record_verdict(workload=W, attempt=1, verdict=unknown, at=T0 + 1)
        history = await store.node_history(since=T0)
        assert [h.node for h in history] == ["n4"]
        assert [r.kind for r in await store.audit_records(workload=W)] == [vocab.AuditKind.VERDICT] * 2
    finally:
        await store.close()


async def test_node_history_holds_only_allocated_nodes_once_per_attempt(db_url: str):
    """A host name from log text never enters lemon memory; a second verdict of an attempt is the same
    incident; every attempt's nodes are part of the allocation."""
    store = await database.open_store(db_url)
    try:
        hardware = verdicts.Verdict(attribution=vocab.Attribution.HARDWARE, category=vocab.Category.GPU_XID_HARDWARE,
                                    suspect_nodes=["n2", "n9"])
        await store.record_attempt(workload=W, attempt=0, at=T0, started_at=T0, nodes=["n1", "n2"])
        await store.record_attempt(workload=W, attempt=0, at=T0, nodes=["n2"])  # merged, never replaced
        await store.record_verdict(workload=W, attempt=0, verdict=hardware, at=T0 + 1)
        await store.record_verdict(workload=W, attempt=0, verdict=hardware, at=T0 + 2)
        await store.record_attempt(workload=W, attempt=1, at=T0 + 5, nodes=["n3", "n4"])
        await store.record_verdict(workload=W, attempt=1, verdict=hardware, at=T0 + 6)  # n2: an earlier attempt's
        assert await store.allocation(W) == ["n1", "n2", "n3", "n4"]
        history = await store.node_history(since=T0)
        assert [(h.node, h.attempt) for h in history] == [("n2", 0), ("n2", 1)]
        assert await store.allocation("slurm/test/unknown") == []
    finally:
        await store.close()


async def test_own_exclusions_are_the_nodes_our_steps_added(db_url: str):
    """The user's ``--exclude`` is in the desired list but not ours; monitor-mode rows exclude nothing."""
    store = await database.open_store(db_url)
    try:
        await store.record_advice(an_advice(1, exclude_nodes=["n7", "n2"]), at=T0)
        await store.record_advice(an_advice(2, exclude_nodes=["n7", "n2", "n3"]), at=T0 + 1)
        await store.record_advice(an_advice(3, exclude_nodes=["n5"], mode="Monitor"), at=T0 + 2)
        for generation, added, status in ((1, ["n2"], "done"), (2, ["n3"], "intent"), (3, ["n5"], "skipped")):
            await store.begin_action(actions.ActionRecord(
                workload=W, attempt=0, generation=generation, step="exclude_nodes",
                operation=actions.Operation.EXCLUDE_NODES, status=actions.ActionStatus(status),
                args={"job_id": "7", "excluded_nodes": ["n7", *added], "added_nodes": added}), at=T0 + 3)
        assert await store.own_exclusions(W) == ["n2", "n3"]
        assert await store.own_exclusions("slurm/test/other") == []
    finally:
        await store.close()


async def test_audit_stream_filters(db_url: str):
    store = await database.open_store(db_url)
    try:
        for generation in (1, 2, 3):
            await store.record_advice(an_advice(generation), at=T0 + generation)
        await store.record_advice(an_advice().model_copy(update={"workload": "slurm/test/8"}), at=T0 + 10)
        assert len(await store.audit_records()) == 4
        assert len(await store.audit_records(workload=W)) == 3
        since = datetime.datetime.fromtimestamp(T0 + 2, datetime.UTC)
        assert [r.payload["generation"] for r in await store.audit_records(workload=W, since=since)] == [2, 3]
        assert [r.payload["generation"] for r in await store.audit_records(workload=W, limit=2)] == [2, 3]
        assert await store.audit_records(kind=vocab.AuditKind.VERDICT) == []
    finally:
        await store.close()


async def test_workloads_and_attempts(db_url: str):
    store = await database.open_store(db_url)
    try:
        await store.upsert_workload(workload=W, scheduler="slurm-local", job_id="7", at=T0, comment="trainguard",
                                    opt_in_errors=["unknown key foo"])
        await store.upsert_workload(workload=W, scheduler="slurm-local", job_id="7", at=T0 + 60, state="RUNNING")
        record = await store.get_workload(W)
        assert record is not None
        assert (record.first_seen, record.last_seen, record.state) == (pytest.approx(T0), pytest.approx(T0 + 60),
                                                                       "RUNNING")
        assert await store.job_id_of(W) == "7" and await store.job_id_of("nope") is None
        await store.record_attempt(workload=W, attempt=0, at=T0, started_at=T0, state="RUNNING")
        await store.record_attempt(workload=W, attempt=0, at=T0, checkpoint_saved=True)
    finally:
        await store.close()


async def test_readonly_open_of_a_missing_database_is_a_clear_error(db_url: str):
    with pytest.raises(database.StoreError) as caught:
        await database.open_store(db_url, readonly=True)
    assert "audit" in str(caught.value)


async def test_unreachable_server_names_the_url_without_password():
    with pytest.raises(database.StoreError) as caught:
        await database.open_store("postgresql+asyncpg://trainguard:s3cret@127.0.0.1:1/audit")
    message = str(caught.value)
    assert "s3cret" not in message and "127.0.0.1:1/audit" in message


def a_tail(attempt: int = 0, path: str = "/scratch/job-7/slurm-7.out", **fields: object) -> audit.TailRecord:
    return audit.TailRecord.model_validate({
        "workload": W, "attempt": attempt, "path": path, "source": "stdout", "inode": 2**40 + 7,
        "offset": 5 * 2**32 + 11, "lineno": 120, "fingerprint": "ab" * 16, "basis": "stored", **fields,
    })


async def test_tail_positions_are_one_row_per_attempt_and_file(db_url: str):
    """Offsets and inodes past 32 bits, paths past any index limit (MySQL's 3072 bytes)."""
    long_path = "/lustre/" + "deep/" * 400 + "slurm-7.out"
    store = await database.open_store(db_url)
    try:
        assert await store.tail_positions(W) == []
        await store.save_tail_positions([a_tail(), a_tail(path=long_path, basis="unknown")], at=T0)
        await store.save_tail_positions([a_tail(offset=99, basis=""), a_tail(attempt=1, offset=0)], at=T0 + 1)
        rows = await store.tail_positions(W)
        assert [(r.attempt, r.path, r.offset, r.basis) for r in rows] == [
            (0, "/scratch/job-7/slurm-7.out", 99, "stored"),  # moved; an empty basis keeps the stored one
            (0, long_path, 5 * 2**32 + 11, "unknown"),
            (1, "/scratch/job-7/slurm-7.out", 0, "stored"),
        ]
        assert rows[1] == a_tail(path=long_path, basis="unknown")
    finally:
        await store.close()


async def test_tail_positions_are_stored_with_the_advice_or_not_at_all(db_url: str):
    store = await database.open_store(db_url)
    try:
        assert await store.record_advice(an_advice(), at=T0, tail=[a_tail(offset=10)]) is True
        assert [r.offset for r in await store.tail_positions(W)] == [10]
        # the same advice again (a restart resuming it): nothing is written, positions included
        assert await store.record_advice(an_advice(), at=T0 + 1, tail=[a_tail(offset=20)]) is False
        assert [r.offset for r in await store.tail_positions(W)] == [10]
        assert await store.record_advice(an_advice(generation=2), at=T0 + 2, tail=[a_tail(offset=30)]) is True
        assert [r.offset for r in await store.tail_positions(W)] == [30]
    finally:
        await store.close()


async def test_an_advice_whose_read_position_another_writer_inserted_first_is_still_recorded(
        tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tailing round saves a workload's read positions while its advice is written with them: when
    the other writer inserts the same position first, the advice's transaction meets the unique key.
    The advice is recorded all the same (the position then saved as an update), never lost: in a
    parallel CI run the decision of a JobSet was, its anomaly and verdict recorded and no advice."""
    store = await database.open_store(f"sqlite+aiosqlite:///{tmp_path}/audit.db")  # type: ignore[operator]
    real = tails.save_tail
    raced: list[bool] = []

    async def other_writer_first(session: object, records: object, at: float) -> None:
        if not raced:  # what the race does to the first try (SQLite's lock cannot interleave the two writers)
            raced.append(True)
            raise sa_exc.IntegrityError("INSERT INTO tail_positions", {}, Exception("UNIQUE constraint failed"))
        await real(session, records, at)  # type: ignore[arg-type]

    try:
        await store.save_tail_positions([a_tail(offset=5)], at=T0)  # the other writer's row
        monkeypatch.setattr(tails, "save_tail", other_writer_first)  # as record_advice calls it
        assert await store.record_advice(an_advice(), at=T0, tail=[a_tail(offset=10)]) is True
        assert raced == [True]
        assert await store.get_advice(W, 0, 1) is not None
        assert [r.offset for r in await store.tail_positions(W)] == [10]
    finally:
        await store.close()


async def test_attempt_facts_rebuild_what_a_restarted_engine_needs(db_url: str):
    store = await database.open_store(db_url)
    try:
        await store.record_attempt(workload=W, attempt=0, at=T0, started_at=T0, checkpoint_saved=True)
        await store.record_attempt(workload=W, attempt=0, at=T0 + 60, ended_at=T0 + 60)
        await store.record_attempt(workload=W, attempt=1, at=T0 + 90, started_at=T0 + 90)
        verdict = verdicts.Verdict(attribution=vocab.Attribution.APPLICATION, category=vocab.Category.PYTHON_EXCEPTION)
        await store.record_verdict(workload=W, attempt=0, verdict=verdict, at=T0 + 61)
        hardware = verdicts.Verdict(attribution=vocab.Attribution.HARDWARE, category=vocab.Category.ECC_MEMORY,
                                    suspect_nodes=["n2"])
        await store.record_verdict(workload=W, attempt=0, verdict=hardware, at=T0 + 62)  # the latest counts
        await store.record_advice(an_advice(), at=T0 + 62)
        await store.record_advice(an_advice(generation=2, action="stop", exclude_nodes=[]), at=T0 + 63)

        first, second = await store.attempt_facts(W)
        assert (first.attempt, first.started_at, first.ended_at, first.checkpoint_saved) == (0, T0, T0 + 60, True)
        assert (first.category, first.attribution) == ("ecc_memory", "hardware")
        assert first.advice == [(1, "requeue", ["n2"]), (2, "stop", [])]
        assert (second.attempt, second.checkpoint_saved, second.category, second.advice) == (1, False, None, [])
        assert await store.attempt_facts("slurm/test/unknown") == []
    finally:
        await store.close()


async def test_ids_differing_by_case_are_distinct_and_text_in_any_script_survives(db_url: str):
    """Workload ids compare as bytes (as on SQLite and PostgreSQL), and a comment or log line in any
    script comes back unchanged, on a database created with the server's stock defaults."""
    store = await database.open_store(db_url)
    text = "trainguard policy=gpu ✓ 日本語 — Xid 79 🚀"
    try:
        await store.upsert_workload(workload="slurm/Train/1", scheduler="slurm", job_id="1", at=T0, comment=text)
        await store.upsert_workload(workload="slurm/train/1", scheduler="slurm", job_id="2", at=T0, comment="lower")
        upper, lower = await store.get_workload("slurm/Train/1"), await store.get_workload("slurm/train/1")
        assert upper is not None and lower is not None
        assert (upper.job_id, upper.comment) == ("1", text)
        assert (lower.job_id, lower.comment) == ("2", "lower")
        await store.record_effect(workload="slurm/Train/1", attempt=0, payload={"line": text}, at=T0)
        [record] = await store.audit_records(workload="slurm/Train/1")
        assert record.payload == {"line": text}
        assert await store.audit_records(workload="slurm/TRAIN/1") == []
    finally:
        await store.close()


async def test_a_person_s_api_action_is_told_to_the_observers_like_every_record(db_url: str):
    """``record_api_action`` goes through the same audit-log path as every other record: the
    observers (the engine's metrics) hear of it after commit, with the row's contract fields."""
    store = await database.open_store(db_url)
    told: list[audit.Written] = []

    class Recorder:
        def audit_written(self, record: audit.Written) -> None:
            told.append(record)

    store.observers.append(Recorder())
    try:
        written = await store.record_api_action(workload=W, attempt=0, payload={"operation": "acknowledge"},
                                                by="alice", at=T0 + 5)
        assert [(r.kind, r.workload, r.attempt, r.payload, r.decided_by, r.at) for r in told] == [
            ("action", W, 0, {"operation": "acknowledge", "by": "alice"}, "api", T0 + 5)]
        assert written.payload == {"operation": "acknowledge", "by": "alice"} and written.decided_by == "api"
        assert written.kind is vocab.AuditKind.ACTION and written.id > 0
        assert await store.audit_records() == [written]
    finally:
        await store.close()
