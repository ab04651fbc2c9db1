"""Group commit (``AuditStore.grouped``): concurrent writes share a transaction, each caller
returns once its own write is committed, and one failing write fails only its own caller."""

from __future__ import annotations

import asyncio

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from trainguard.store import audit, database

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
