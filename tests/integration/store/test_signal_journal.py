"""The signal journal's table on SQLite, PostgreSQL and MariaDB: written by migration 0008, read back in
order with exact payloads, and bounded (retention, per-workload cap: cheap kinds dropped first)."""

from __future__ import annotations

import json

from trainguard.store import database
from trainguard.store import journal as journal_store

T0 = 1_800_000_000.123456
W = "slurm/test/7"


async def test_entries_round_trip_in_order_and_filter_by_workload_time_and_kind(db_url: str) -> None:
    store = await database.open_store(db_url)
    try:
        journal = journal_store.JournalStore(store.sql_engine, retention_s=1e9, max_bytes=10**9)
        await journal.append(workload=W, attempt=0, kind="snapshot", at=T0, payload={"job": {"state": "RUNNING"}})
        await journal.append(workload=W, attempt=0, kind="advice", at=T0 + 1.5,
                             payload={"at": T0 + 1.5, "nested": {"nodes": ["n1", "n2"], "x": 0.1}})
        await journal.append(workload="other", attempt=2, kind="verdict", at=T0 + 2, payload={"v": 1})

        rows = await journal.read()
        assert [(r.workload, r.attempt, r.kind) for r in rows] == [
            (W, 0, "snapshot"), (W, 0, "advice"), ("other", 2, "verdict")]
        assert rows[1].payload == {"at": T0 + 1.5, "nested": {"nodes": ["n1", "n2"], "x": 0.1}}
        assert abs(rows[1].at - (T0 + 1.5)) < 1e-6
        assert [r.kind for r in await journal.read(workload=W)] == ["snapshot", "advice"]
        assert [r.kind for r in await journal.read(since=T0 + 1, until=T0 + 1.6)] == ["advice"]
        assert [r.kind for r in await journal.read(kinds=["verdict"])] == ["verdict"]
        [text] = await journal.read_json(kind="advice", workload=W, since=T0 + 1)
        assert json.loads(text) == {"at": T0 + 1.5, "nested": {"nodes": ["n1", "n2"], "x": 0.1}}
    finally:
        await store.close()


async def test_the_cap_drops_snapshots_before_decisions_and_retention_drops_old_entries(db_url: str) -> None:
    store = await database.open_store(db_url)
    try:
        journal = journal_store.JournalStore(store.sql_engine, retention_s=1e9, max_bytes=200)
        await journal.append(workload=W, attempt=0, kind="advice", at=T0, payload={"a": "x" * 60})
        await journal.append(workload=W, attempt=0, kind="snapshot", at=T0 + 1, payload={"s": "y" * 60})
        await journal.append(workload=W, attempt=1, kind="advice", at=T0 + 2, payload={"a": "z" * 60})
        await journal.append(workload="other", attempt=0, kind="snapshot", at=T0 + 2, payload={"s": "o" * 60})
        # W is past 200 characters: its snapshot goes first, both decisions stay; other workloads untouched
        assert [(r.workload, r.kind, r.attempt) for r in await journal.read()] == [
            (W, "advice", 0), (W, "advice", 1), ("other", "snapshot", 0)]
        await journal.append(workload=W, attempt=2, kind="advice", at=T0 + 3, payload={"a": "w" * 60})
        assert [r.attempt for r in await journal.read(workload=W)] == [1, 2]  # then the oldest decision

        later = journal_store.JournalStore(store.sql_engine, retention_s=10, max_bytes=10**9)
        await later.append(workload="new", attempt=0, kind="snapshot", at=T0 + 12.5, payload={})  # keeps T0 + 2.5 on
        assert [(r.workload, r.attempt) for r in await later.read()] == [(W, 2), ("new", 0)]
    finally:
        await store.close()


async def test_a_retention_longer_than_the_clock_keeps_everything_instead_of_failing(db_url: str) -> None:
    store = await database.open_store(db_url)
    try:
        journal = journal_store.JournalStore(store.sql_engine, retention_s=1e12, max_bytes=10**9)
        await journal.append(workload=W, attempt=0, kind="snapshot", at=T0, payload={})
        assert [r.kind for r in await journal.read()] == ["snapshot"]
    finally:
        await store.close()


async def test_the_entry_being_written_is_never_the_one_the_cap_drops(db_url: str) -> None:
    store = await database.open_store(db_url)
    try:
        journal = journal_store.JournalStore(store.sql_engine, retention_s=1e9, max_bytes=200)
        await journal.append(workload=W, attempt=0, kind="advice", at=T0, payload={"a": "x" * 80})
        await journal.append(workload=W, attempt=1, kind="advice", at=T0 + 1, payload={"a": "y" * 80})
        await journal.append(workload=W, attempt=2, kind="snapshot", at=T0 + 2, payload={"s": "z" * 80})
        # over the cap with no older cheap row: the oldest decision goes, the new snapshot stays
        assert [(r.kind, r.attempt) for r in await journal.read()] == [("advice", 1), ("snapshot", 2)]
        await journal.append_many([(W, 3, "snapshot", T0 + 3, {"s": "w" * 80}), (W, 3, "progress", T0 + 3, {})])
        assert [(r.kind, r.attempt) for r in await journal.read()] == [
            ("advice", 1), ("snapshot", 3), ("progress", 3)]
    finally:
        await store.close()
