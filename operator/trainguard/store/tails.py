"""Read positions: where reading each output file (or log stream) of each attempt stands.

Place: the part of ``store.audit.AuditStore`` the tailing round saves to and a restarted engine
resumes from (``signals.resume``). ``save_tail`` is also called inside ``record_advice``'s
transaction (``recoveries``), so an advice and the read positions behind it are stored together.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncSession

from trainguard.model import times
from trainguard.store import sessions, tables
from trainguard.store.records import TailRecord, path_key


class TailStore(sessions.StoreBase):
    """Read-position rows (see the module docstring)."""

    async def save_tail_positions(self, records: Sequence[TailRecord], *, at: float) -> None:
        """Create or move read positions (one transaction for all); an empty ``basis`` keeps the stored one."""
        if not records:
            return
        item = [(rec, at) for rec in records]
        try:
            await self._transaction(lambda session: save_tail(session, records, at), bulk=(save_tails, item))
        except sa_exc.IntegrityError:
            # Another writer inserted the same key first: the rows exist now, so this is an update.
            await self._transaction(lambda session: save_tail(session, records, at), bulk=(save_tails, item))

    async def tail_positions(self, workload: str) -> list[TailRecord]:
        """Every saved read position of a workload, oldest attempt first."""
        return (await self.tail_positions_many([workload])).get(workload, [])

    async def tail_positions_many(self, workloads: Sequence[str]) -> dict[str, list[TailRecord]]:
        """``tail_positions`` of many workloads, one query per 500."""
        names = list(dict.fromkeys(workloads))
        out: dict[str, list[TailRecord]] = {}
        async with self._sessions() as session:
            for start in range(0, len(names), 500):
                query = (sa.select(tables.TailPositionRow)
                         .where(tables.TailPositionRow.workload.in_(names[start:start + 500]))
                         .order_by(tables.TailPositionRow.attempt, tables.TailPositionRow.id))
                for r in (await session.execute(query)).scalars().all():
                    out.setdefault(r.workload, []).append(TailRecord(
                        workload=r.workload, attempt=r.attempt, path=r.path, source=r.source, inode=r.inode,
                        offset=r.byte_offset, lineno=r.lineno, fingerprint=r.fingerprint, basis=r.basis))
        return out


async def save_tail(session: AsyncSession, records: Sequence[TailRecord], at: float) -> None:
    """Create or move ``records`` in ``session``'s transaction; an empty ``basis`` keeps the stored one."""
    await save_timed(session, [(rec, at) for rec in records])


async def save_tails(session: AsyncSession, items: list[list[tuple[TailRecord, float]]]) -> None:
    """``save_tail_positions`` of a group of callers (``sessions.Bulk``), in one pass."""
    await save_timed(session, [pair for item in items for pair in item])


async def save_timed(session: AsyncSession, records: Sequence[tuple[TailRecord, float]]) -> None:
    """``save_tail`` of records each saved at its own time."""
    # The ids of these workloads' rows in one query per 500 (not one per record), then one
    # executemany UPDATE by id: the tailing round saves the moved positions of every tracked
    # workload several times a second, and loading and flushing thousands of ORM rows per round
    # cost ~30 us each (at 10,000 workloads a third of a core, with SQLite's write lock held).
    names = list(dict.fromkeys(rec.workload for rec, _ in records))
    table = tables.TailPositionRow.__table__
    assert isinstance(table, sa.Table)
    ids: dict[tuple[str, int, str], int] = {}
    for start in range(0, len(names), sessions.IN_CHUNK):
        chunk = names[start:start + sessions.IN_CHUNK]
        query = sa.select(table.c.id, table.c.workload, table.c.attempt, table.c.path_key).where(
            table.c.workload.in_(chunk))
        for row_id, workload, attempt, key in (await session.execute(query)).all():
            ids[(workload, attempt, key)] = row_id
    moved: dict[int, dict[str, object]] = {}
    added: dict[tuple[str, int, str], tables.TailPositionRow] = {}
    new = [(rec.workload, at) for rec, at in records if (rec.workload, rec.attempt, path_key(rec.path)) not in ids]
    if new:  # every row keyed by a workload needs its row: all of them in one query per 500
        await sessions.ensure_workloads(session, new)
    for rec, at in records:
        key = (rec.workload, rec.attempt, path_key(rec.path))
        values: dict[str, object] = {"source": rec.source, "inode": rec.inode, "byte_offset": rec.offset,
                                     "lineno": rec.lineno, "fingerprint": rec.fingerprint,
                                     "updated_at": times.to_datetime(at)}
        row_id = ids.get(key)
        if row_id is not None:
            if rec.basis:
                values["basis"] = rec.basis
            moved.setdefault(row_id, {}).update(values)  # a later record of the same key wins
            continue
        row = added.get(key)
        if row is None:
            row = added[key] = tables.TailPositionRow(workload=rec.workload, attempt=rec.attempt,
                                                      path_key=key[2], path=rec.path)
        for name, value in values.items():
            setattr(row, name, value)
        if rec.basis:
            row.basis = rec.basis
    # Rows keep their stored basis unless a record brings one: one statement per set of columns.
    by_columns: dict[tuple[str, ...], list[dict[str, object]]] = {}
    for row_id, values in moved.items():
        by_columns.setdefault(tuple(sorted(values)), []).append(
            {"row_id": row_id, **{f"new_{name}": value for name, value in values.items()}})
    for columns, params in by_columns.items():
        stmt = (sa.update(table).where(table.c.id == sa.bindparam("row_id"))
                .values({name: sa.bindparam(f"new_{name}") for name in columns}))
        await session.execute(stmt, params)
    await sessions.insert_new(session, list(added.values()))  # one executemany for the new rows
