"""Read-side queries of the HTTP API: filtered, keyset-paginated views of the audit database.

Place: beside ``audit.py`` (the write side and the engine's own reads), used only by
``trainguard.http``. Every list is keyset-paginated: a page is ``limit`` rows after a key (the sort
value and the row id of the last row seen), never an OFFSET, so page 2,000 of a million audit rows
costs what page 1 costs and rows written meanwhile cause no duplicates or gaps. The caller turns
keys into opaque cursors. Sorting happens in the database.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

from trainguard.model import vocab
from trainguard.store import audit, tables

WORKLOAD_SORTS: Final = ("-last_seen", "last_seen", "id", "-id", "-first_seen", "first_seen")
"""Server-side sort orders of the workloads list (``-`` = descending); ties broken by id."""

_WORKLOAD_COLUMNS: Final = {
    "last_seen": tables.Workload.last_seen, "first_seen": tables.Workload.first_seen, "id": tables.Workload.id,
}


@dataclasses.dataclass(frozen=True)
class WorkloadFilter:
    states: Sequence[str] = ()
    policies: Sequence[str] = ()
    policies_not: Sequence[str] | None = None
    """Exclude these policies (the ``mode`` filter maps to policy names); None: no exclusion."""
    scheduler: str | None = None
    has_anomaly: bool | None = None
    text: str | None = None
    """Case-insensitive substring of the id, job id, policy or comment."""


@dataclasses.dataclass(frozen=True)
class WorkloadRow:
    workload: audit.WorkloadRecord
    attempt: int
    anomalies: int


@dataclasses.dataclass(frozen=True)
class AttemptRow:
    attempt: int
    state: str
    started_at: datetime.datetime | None
    ended_at: datetime.datetime | None
    nodes: list[str]
    checkpoint_saved: bool


@dataclasses.dataclass(frozen=True)
class AuditFilter:
    workload: str | None = None
    attempt: int | None = None
    kinds: Sequence[vocab.AuditKind] = ()
    deciders: Sequence[str] = ()
    since: datetime.datetime | None = None
    until: datetime.datetime | None = None
    """Exclusive upper bound."""
    after_id: int | None = None
    """Only records with a larger id (the live stream's resume point)."""


def _like(text: str) -> str:
    escaped = text.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _record(r: tables.AuditLogRow) -> audit.AuditRecord:
    return audit.AuditRecord(
        id=r.id, time=r.time, workload=r.workload, attempt=r.attempt, kind=vocab.AuditKind(r.kind),
        payload=dict(r.payload), decided_by=r.decided_by, policy_version=r.policy_version,
        catalog_version=r.catalog_version, settings_fingerprint=r.settings_fingerprint,
    )


class ReadQueries:
    """The API's reads over one database (the engine of an open ``AuditStore``)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._sessions = async_sessionmaker(engine, expire_on_commit=False)

    # -- workloads ------------------------------------------------------------------------------

    async def workloads(
        self, flt: WorkloadFilter, *, sort: str, after: tuple[Any, str] | None, limit: int,
    ) -> list[WorkloadRow]:
        """One page of workloads in ``sort`` order after the key ``(sort value, id)`` of the last row
        seen; ``limit + 1`` rows are read so the caller knows whether a next page exists."""
        w = tables.Workload
        latest = (sa.select(sa.func.coalesce(sa.func.max(tables.Attempt.attempt), 0))
                  .where(tables.Attempt.workload == w.id).scalar_subquery())
        count = (sa.select(sa.func.count(tables.AnomalyRow.id))
                 .where(tables.AnomalyRow.workload == w.id).scalar_subquery())
        query = sa.select(w, latest, count)
        if flt.states:
            query = query.where(w.state.in_(list(flt.states)))
        if flt.policies:
            query = query.where(w.policy.in_(list(flt.policies)))
        if flt.policies_not is not None and flt.policies_not:
            query = query.where(w.policy.not_in(list(flt.policies_not)))
        if flt.scheduler:
            query = query.where(w.scheduler == flt.scheduler)
        if flt.has_anomaly is not None:
            exists = sa.exists().where(tables.AnomalyRow.workload == w.id)
            query = query.where(exists if flt.has_anomaly else ~exists)
        if flt.text:
            pattern = _like(flt.text)
            query = query.where(sa.or_(*(sa.func.lower(col).like(pattern, escape="\\")
                                         for col in (w.id, w.job_id, w.policy, w.comment))))
        descending = sort.startswith("-")
        column = _WORKLOAD_COLUMNS[sort.lstrip("-")]
        if after is not None:
            value, last_id = after
            if column is w.id:
                query = query.where(w.id < last_id if descending else w.id > last_id)
            elif descending:
                query = query.where(sa.or_(column < value, sa.and_(column == value, w.id < last_id)))
            else:
                query = query.where(sa.or_(column > value, sa.and_(column == value, w.id > last_id)))
        if column is w.id:
            query = query.order_by(w.id.desc() if descending else w.id)
        else:
            query = query.order_by(column.desc() if descending else column, w.id.desc() if descending else w.id)
        async with self._sessions() as session:
            rows = (await session.execute(query.limit(limit + 1))).all()
        return [WorkloadRow(workload=_workload(row[0]), attempt=int(row[1] or 0), anomalies=int(row[2] or 0))
                for row in rows]

    async def workload(self, workload: str) -> WorkloadRow | None:
        async with self._sessions() as session:
            row = await session.get(tables.Workload, workload)
            if row is None:
                return None
            latest = (await session.execute(sa.select(sa.func.max(tables.Attempt.attempt))
                                            .where(tables.Attempt.workload == workload))).scalar()
            count = (await session.execute(sa.select(sa.func.count(tables.AnomalyRow.id))
                                           .where(tables.AnomalyRow.workload == workload))).scalar()
            return WorkloadRow(workload=_workload(row), attempt=int(latest or 0), anomalies=int(count or 0))

    async def attempts(self, workload: str) -> list[AttemptRow]:
        query = sa.select(tables.Attempt).where(tables.Attempt.workload == workload).order_by(tables.Attempt.attempt)
        async with self._sessions() as session:
            return [AttemptRow(attempt=r.attempt, state=r.state, started_at=r.started_at, ended_at=r.ended_at,
                               nodes=[str(n) for n in r.nodes or []], checkpoint_saved=bool(r.checkpoint_saved))
                    for r in (await session.execute(query)).scalars().all()]

    async def covered(self) -> dict[str, int]:
        """Workloads per policy name (the policies view's "covered workloads")."""
        query = sa.select(tables.Workload.policy, sa.func.count()).group_by(tables.Workload.policy)
        async with self._sessions() as session:
            return {str(name): int(n) for name, n in (await session.execute(query)).all()}

    # -- the audit stream -------------------------------------------------------------------------

    async def audit(self, flt: AuditFilter, *, descending: bool, after: int | None, limit: int
                    ) -> list[audit.AuditRecord]:
        """One page of audit records ordered by id (the order they were written), after the id of the
        last record seen; ``limit + 1`` rows are read so the caller knows whether a next page exists."""
        a = tables.AuditLogRow
        query = sa.select(a)
        if flt.workload is not None:
            query = query.where(a.workload == flt.workload)
        if flt.attempt is not None:
            query = query.where(a.attempt == flt.attempt)
        if flt.kinds:
            query = query.where(a.kind.in_([k.value for k in flt.kinds]))
        if flt.deciders:
            query = query.where(a.decided_by.in_(list(flt.deciders)))
        if flt.since is not None:
            query = query.where(a.time >= flt.since)
        if flt.until is not None:
            query = query.where(a.time < flt.until)
        if flt.after_id is not None:
            query = query.where(a.id > flt.after_id)
        if after is not None:
            query = query.where(a.id < after if descending else a.id > after)
        query = query.order_by(a.id.desc() if descending else a.id).limit(limit + 1)
        async with self._sessions() as session:
            return [_record(r) for r in (await session.execute(query)).scalars().all()]

    async def last_audit_id(self) -> int:
        """The id of the newest audit record (0 when there is none): where a live stream starts."""
        async with self._sessions() as session:
            return int((await session.execute(sa.select(sa.func.max(tables.AuditLogRow.id)))).scalar() or 0)

    # -- nodes ----------------------------------------------------------------------------------

    async def node_actions(self, operations: Sequence[str], *, since: datetime.datetime
                           ) -> list[tables.ActionRow]:
        """Our own node actions (drain, resume) since ``since``, oldest first (detached rows)."""
        query = (sa.select(tables.ActionRow).where(tables.ActionRow.operation.in_(list(operations)),
                                                   tables.ActionRow.created_at >= since)
                 .order_by(tables.ActionRow.id))
        async with self._sessions() as session:
            return list((await session.execute(query)).scalars().all())


def _workload(row: tables.Workload) -> audit.WorkloadRecord:
    return audit.WorkloadRecord(
        id=row.id, scheduler=row.scheduler, job_id=row.job_id, policy=row.policy, comment=row.comment,
        opt_in_errors=[str(e) for e in row.opt_in_errors or []], state=row.state,
        first_seen=audit.to_epoch(row.first_seen), last_seen=audit.to_epoch(row.last_seen),
    )
