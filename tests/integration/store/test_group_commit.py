"""Group commit (``AuditStore.grouped``): concurrent writes share a transaction, each caller
returns once its own write is committed, and one failing write fails only its own caller."""

from __future__ import annotations

import asyncio
import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from trainguard.store import audit, database, tables

T0 = 1_800_000_000.0


def count_commits(store: audit.AuditStore) -> list[int]:
    commits = [0]

    def on_commit(_connection: object) -> None:
        commits[0] += 1

    sa.event.listen(store.sql_engine.sync_engine, "commit", on_commit)
    return commits


async def test_concurrent_grouped_writes_share_commits(db_url: str) -> None:
    store = await database.open_store(db_url)
    try:
        commits = count_commits(store)

        async def register(i: int) -> None:
            with store.grouped():
                await store.upsert_workload(workload=f"slurm/t/{i}", scheduler="fake", job_id=str(i), at=T0)
                await store.record_attempt(workload=f"slurm/t/{i}", attempt=0, at=T0, nodes=[f"n{i}"])

        await asyncio.gather(*(register(i) for i in range(100)))
        assert commits[0] <= 4  # two rounds of one commit each, instead of 200
        for i in (0, 57, 99):
            record = await store.get_workload(f"slurm/t/{i}")
            assert record is not None and record.job_id == str(i)
            assert await store.allocation(f"slurm/t/{i}") == [f"n{i}"]

        commits[0] = 0
        for i in range(3):  # outside the block: one transaction per write, as before
            await store.upsert_workload(workload=f"slurm/u/{i}", scheduler="fake", job_id=str(i), at=T0)
        assert commits[0] == 3
    finally:
        await store.close()


async def test_a_failing_write_fails_only_its_caller(db_url: str) -> None:
    store = await database.open_store(db_url)
    try:
        async def broken(session: AsyncSession) -> None:
            await session.execute(sa.text("SELECT * FROM no_such_table"))

        async def bad() -> None:
            with store.grouped():
                await store._transaction(broken)

        async def good(i: int) -> None:
            with store.grouped():
                await store.upsert_workload(workload=f"slurm/t/{i}", scheduler="fake", job_id=str(i), at=T0)

        results = await asyncio.gather(good(1), bad(), good(2), return_exceptions=True)
        assert results[0] is None and results[2] is None
        assert isinstance(results[1], sa.exc.SQLAlchemyError)
        assert await store.get_workload("slurm/t/1") is not None
        assert await store.get_workload("slurm/t/2") is not None
    finally:
        await store.close()


async def test_a_lone_grouped_write_is_an_ordinary_transaction(db_url: str) -> None:
    store = await database.open_store(db_url)
    try:
        commits = count_commits(store)
        with store.grouped():
            await store.upsert_workload(workload="slurm/t/1", scheduler="fake", job_id="1", at=T0)
        assert commits[0] == 1
    finally:
        await store.close()


async def test_read_positions_of_many_workloads_are_saved_and_moved_in_one_write(db_url: str) -> None:
    """``save_tail_positions`` reads the existing rows in bulk: new rows are created, existing ones
    moved, and one key given twice in a call is one row (the later position)."""
    store = await database.open_store(db_url)
    try:
        def rec(i: int, offset: int) -> audit.TailRecord:
            return audit.TailRecord(workload=f"slurm/t/{i}", attempt=0, path=f"/o/{i}.out", source="stdout",
                                    inode=1, offset=offset, lineno=offset // 10, fingerprint="")

        await store.save_tail_positions([rec(i, 10) for i in range(20)], at=T0)
        await store.save_tail_positions([*(rec(i, 20) for i in range(0, 20, 2)), rec(1, 30), rec(1, 40)], at=T0 + 1)
        assert [r.offset for r in await store.tail_positions("slurm/t/0")] == [20]
        assert [r.offset for r in await store.tail_positions("slurm/t/1")] == [40]
        assert [r.offset for r in await store.tail_positions("slurm/t/3")] == [10]
        assert await store.known_workloads(["slurm/t/3", "slurm/t/99"]) == {"slurm/t/3"}
    finally:
        await store.close()


async def test_grouped_tracking_writes_are_written_in_bulk_with_the_same_rows(db_url: str) -> None:
    """Within ``grouped()``, the writes of first sight (``upsert_workload``, ``record_attempt``,
    ``save_tail_positions``) of many workloads are written together, a few statements for all
    (issue 28: several round trips a job made tracking 10,000 jobs take minutes), and leave the rows
    the same writes one by one leave: the attempt's fields, its nodes merged into what is stored, a
    checkpoint time moved forward only, the read positions, first_seen kept."""
    store = await database.open_store(db_url)
    try:
        await store.upsert_workload(workload="slurm/t/0", scheduler="fake", job_id="old", at=T0 - 100)
        await store.record_attempt(workload="slurm/t/0", attempt=0, at=T0 - 100, nodes=["n-old"],
                                   checkpoint_at=T0 + 50)
        statements = [0]

        def on_statement(*_args: object) -> None:
            statements[0] += 1

        sa.event.listen(store.sql_engine.sync_engine, "before_cursor_execute", on_statement)

        async def first_sight(i: int) -> None:
            name = f"slurm/t/{i}"
            with store.grouped():
                await store.upsert_workload(workload=name, scheduler="fake", job_id=str(i), at=T0, policy="p",
                                            state="RUNNING", incarnation=f"uid-{i}")
                await store.save_tail_positions([audit.TailRecord(
                    workload=name, attempt=0, path=f"/o/{i}.out", source="stdout", inode=7, offset=i,
                    lineno=1, fingerprint="f", basis="first_attempt")], at=T0)
                await store.record_attempt(workload=name, attempt=0, at=T0, started_at=T0, state="RUNNING",
                                           checkpoint_at=T0)
                await store.record_attempt(workload=name, attempt=0, at=T0, nodes=[f"n{i}", "n-shared"])

        await asyncio.gather(*(first_sight(i) for i in range(200)))
        assert statements[0] <= 40  # one by one: about 8 per workload, 1,600 here
        for i in (0, 1, 199):
            name = f"slurm/t/{i}"
            record = await store.get_workload(name)
            assert record is not None
            assert (record.job_id, record.policy, record.state, record.incarnation) == (str(i), "p", "RUNNING",
                                                                                       f"uid-{i}")
            assert record.first_seen == (T0 - 100 if i == 0 else T0) and record.last_seen == T0
            nodes = ["n-old", "n0", "n-shared"] if i == 0 else [f"n{i}", "n-shared"]
            assert await store.allocation(name) == nodes
            [fact] = await store.attempt_facts(name)
            assert fact.started_at == T0
            [position] = await store.tail_positions(name)
            assert (position.offset, position.basis, position.inode) == (i, "first_attempt", 7)
        async with store.sql_engine.connect() as connection:
            checkpoint = (await connection.execute(sa.select(tables.Attempt.last_checkpoint_at).where(
                tables.Attempt.workload == "slurm/t/0"))).scalar_one()
        assert checkpoint is not None
        assert abs(audit.to_epoch(checkpoint.replace(tzinfo=checkpoint.tzinfo or datetime.UTC)) - (T0 + 50)) < 1e-3
    finally:
        await store.close()


async def test_history_and_positions_of_many_workloads_are_read_in_a_few_queries(db_url: str) -> None:
    """A replica taking a shard over (or a restart) tracks thousands of known workloads at once; their
    attempts and read positions are read a few queries per 500 workloads (issue 28: four queries per
    workload made a take-over of 1,000 workloads hold the replica ~20 s), and each workload gets
    exactly what it gets read alone."""
    store = await database.open_store(db_url)
    try:
        names = [f"slurm/t/{i}" for i in range(600)]
        for i, name in enumerate(names[:-1]):  # the last one has no attempt and no position
            await store.record_attempt(workload=name, attempt=0, at=T0, started_at=T0, ended_at=T0 + 5)
            if i % 3 == 0:
                await store.record_attempt(workload=name, attempt=1, at=T0 + 6, started_at=T0 + 6,
                                           checkpoint_saved=True)
        await store.save_tail_positions([audit.TailRecord(
            workload=name, attempt=i % 2, path=f"/o/{i}.out", source="stdout", inode=1, offset=10 * i, lineno=i,
            fingerprint="") for i, name in enumerate(names[:-1])], at=T0)
        statements = [0]

        def on_statement(*_args: object) -> None:
            statements[0] += 1

        sa.event.listen(store.sql_engine.sync_engine, "before_cursor_execute", on_statement)
        facts = await store.attempt_facts_many(names)
        tails = await store.tail_positions_many(names)
        assert statements[0] <= 8, statements  # 3 + 1 queries per 500 workloads
        sa.event.remove(store.sql_engine.sync_engine, "before_cursor_execute", on_statement)
        assert names[-1] not in facts and names[-1] not in tails
        for name in (names[0], names[1], names[299], names[598]):
            assert facts[name] == await store.attempt_facts(name)
            assert tails[name] == await store.tail_positions(name)
        assert [f.attempt for f in facts[names[3]]] == [0, 1] and facts[names[3]][1].checkpoint_saved
        assert [f.attempt for f in facts[names[4]]] == [0]
        assert [(t.attempt, t.offset) for t in tails[names[5]]] == [(1, 50)]
    finally:
        await store.close()
