"""The signal journal's table: append, read back in order, and keep it bounded.

Place: ``store/``, beside the audit repository and over the same database engine. The rows are
written by ``journal.recorder`` (the engine's recorder) and read by the replay and the backtest.
Payloads are plain JSON here; ``journal.entries`` gives them their types.

Bounds, so the journal never grows without limit:
- retention: rows older than ``retention_s`` are deleted (checked at most every ``PRUNE_EVERY_S``
  of the writer's clock);
- a cap of ``max_bytes`` payload characters per workload: when a write passes it, the oldest rows
  of the *cheap* kinds (``KEPT_LAST`` excluded: scheduler snapshots, checkpoint and progress samples) go first,
  then, if that is not enough, the oldest decision rows. A decision keeps its own inputs inside
  its row, so dropping one row never makes another unreplayable.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from trainguard.model import times
from trainguard.store import tables

PRUNE_EVERY_S = 3600.0
KEPT_LAST = frozenset({"verdict", "advice"})
"""Kinds dropped only after every other kind of the workload is gone (they are what replay needs)."""


Entry = tuple[str, int, str, float, dict[str, Any]]
"""(workload, attempt, kind, at, payload) of one entry to write."""


class JournalRow(BaseModel):
    """One stored journal entry, plain values."""

    model_config = ConfigDict(frozen=True)

    id: int
    workload: str
    attempt: int
    kind: str
    at: float
    payload: dict[str, Any]


class JournalStore:
    """The ``signal_journal`` table of one database (opened by ``store.database``)."""

    def __init__(self, engine: AsyncEngine, *, retention_s: float, max_bytes: int) -> None:
        self._sessions = async_sessionmaker(engine, expire_on_commit=False)
        self.retention_s = retention_s
        self.max_bytes = max_bytes
        self._pruned_at: float | None = None
        self._sizes: dict[str, int] | None = None
        """Payload characters per workload, as this writer knows them (loaded once, then counted up):
        the cap is checked against the table only when this count passes it, so a write is one insert.
        Deletions by retention or by another writer make it an overestimate, corrected by that check."""

    async def append(self, *, workload: str, attempt: int, kind: str, at: float, payload: dict[str, Any]) -> None:
        """Store one entry (``append_many`` with one item)."""
        await self.append_many([(workload, attempt, kind, at, payload)])

    async def append_many(self, items: Sequence[Entry]) -> None:
        """Store ``items`` in one transaction; then enforce the cap of each workload that passed it
        (and, at most once per ``PRUNE_EVERY_S``, the retention)."""
        if not items:
            return
        row = tables.JournalRow
        async with self._sessions() as session, session.begin():
            if self._sizes is None:
                totals = await session.execute(sa.select(row.workload, sa.func.sum(row.size)).group_by(row.workload))
                self._sizes = {name: int(total or 0) for name, total in totals.all()}
            before = (await session.execute(sa.select(sa.func.max(row.id)))).scalar_one() or 0
            values = []
            for workload, attempt, kind, at, payload in items:
                size = len(json.dumps(payload, separators=(",", ":")))
                self._sizes[workload] = self._sizes.get(workload, 0) + size
                values.append({"workload": workload, "attempt": attempt, "kind": kind, "at": _dt(at), "size": size,
                               "payload": payload})
            await session.execute(sa.insert(row), values)
            for workload in dict.fromkeys(item[0] for item in items):
                if self._sizes[workload] > self.max_bytes:
                    self._sizes[workload] = await self._cap(session, workload, newer_than=before)
            newest = max(item[3] for item in items)
            cutoff = newest - self.retention_s
            if (self._pruned_at is None or newest - self._pruned_at >= PRUNE_EVERY_S) and cutoff > 0:
                # (a retention reaching back before 1970 keeps everything: no date to compare with)
                self._pruned_at = newest
                await session.execute(sa.delete(row).where(row.at < _dt(cutoff)))

    async def _cap(self, session: AsyncSession, workload: str, *, newer_than: int) -> int:
        """Drop the workload's oldest rows, cheap kinds first, until it is within the cap; rows of this
        write (id > ``newer_than``) stay. Returns the workload's total after."""
        row = tables.JournalRow
        rows = (await session.execute(sa.select(row.id, row.kind, row.size).where(row.workload == workload)
                                      .order_by(row.id))).all()
        total = sum(int(r.size) for r in rows)
        old = [r for r in rows if r.id <= newer_than]
        ordered = [r for r in old if r.kind not in KEPT_LAST] + [r for r in old if r.kind in KEPT_LAST]
        drop: list[int] = []
        for r in ordered:
            if total <= self.max_bytes:
                break
            drop.append(r.id)
            total -= r.size
        if drop:
            await session.execute(sa.delete(row).where(row.id.in_(drop)))
        return total

    async def read_json(
        self, *, kind: str, workload: str | None = None, since: float | None = None, until: float | None = None,
    ) -> list[str]:
        """The payloads of one kind as JSON text, in the order written: for bulk readers (the backtest),
        which parse them straight into their models, faster than through Python objects."""
        row = tables.JournalRow
        query = sa.select(sa.cast(row.payload, sa.Text)).where(row.kind == kind).order_by(row.id)
        if workload is not None:
            query = query.where(row.workload == workload)
        if since is not None:
            query = query.where(row.at >= _dt(since))
        if until is not None:
            query = query.where(row.at <= _dt(until))
        async with self._sessions() as session:
            return [text for text in (await session.execute(query)).scalars().all() if text]

    async def read(
        self, *, workload: str | None = None, since: float | None = None, until: float | None = None,
        kinds: Sequence[str] | None = None,
    ) -> list[JournalRow]:
        """Entries in the order they were written (by id), filtered."""
        row = tables.JournalRow
        query = sa.select(row).order_by(row.id)
        if workload is not None:
            query = query.where(row.workload == workload)
        if since is not None:
            query = query.where(row.at >= _dt(since))
        if until is not None:
            query = query.where(row.at <= _dt(until))
        if kinds:
            query = query.where(row.kind.in_(list(kinds)))
        async with self._sessions() as session:
            found = (await session.execute(query)).scalars().all()
            return [JournalRow(id=r.id, workload=r.workload, attempt=r.attempt, kind=r.kind, at=r.at.timestamp(),
                               payload=r.payload) for r in found]


def _dt(epoch: float) -> datetime.datetime:
    return times.to_datetime(epoch)
