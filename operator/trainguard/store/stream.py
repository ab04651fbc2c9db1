"""The unified audit stream: reading it, and the records a person's API change writes into it.

Place: the part of ``store.audit.AuditStore`` that ``trainguard audit``, the HTTP API's event
stream and the scorecard read (``audit_records``), and that the HTTP API writes a person's mode
switch, acknowledgement or undo to (``record_api_action``, through the same ``_log`` as every record).
"""

from __future__ import annotations

import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from trainguard.model import times, vocab
from trainguard.store import records, sessions, tables


class StreamStore(sessions.StoreBase):
    """The ``audit_log`` table as a stream (see the module docstring)."""

    async def record_api_action(
        self, *, workload: str, attempt: int | None, payload: dict[str, object], by: str, at: float,
    ) -> records.AuditRecord:
        """A change a person made through the HTTP API (mode switch, acknowledgement, undo): an
        ``action`` record whose ``decided_by`` is ``api`` and whose payload names who (``by``)."""

        async def work(session: AsyncSession) -> records.AuditRecord:
            row = self._log(session, at=at, workload=workload, attempt=attempt, kind=vocab.AuditKind.ACTION,
                            payload={**payload, "by": by}, decided_by="api")
            await session.flush()
            return records.AuditRecord(
                id=row.id, time=times.to_datetime(at), workload=workload, attempt=attempt,
                kind=vocab.AuditKind.ACTION, payload=dict(row.payload), decided_by="api",
                policy_version=row.policy_version, catalog_version=row.catalog_version,
                settings_fingerprint=row.settings_fingerprint)

        return await self._transaction(work)

    async def audit_records(
        self, *, workload: str | None = None, kind: vocab.AuditKind | None = None,
        since: datetime.datetime | None = None, limit: int | None = None,
    ) -> list[records.AuditRecord]:
        """Audit records oldest first; with ``limit``, the most recent ``limit`` of them."""
        query = sa.select(tables.AuditLogRow)
        if workload is not None:
            query = query.where(tables.AuditLogRow.workload == workload)
        if kind is not None:
            query = query.where(tables.AuditLogRow.kind == kind.value)
        if since is not None:
            query = query.where(tables.AuditLogRow.time >= since)
        if limit is not None:
            query = query.order_by(tables.AuditLogRow.id.desc()).limit(limit)
        else:
            query = query.order_by(tables.AuditLogRow.id)
        async with self._sessions() as session:
            rows = list((await session.execute(query)).scalars().all())
        if limit is not None:
            rows.reverse()
        return [
            records.AuditRecord(
                id=r.id, time=r.time, workload=r.workload, attempt=r.attempt, kind=vocab.AuditKind(r.kind),
                payload=dict(r.payload), decided_by=r.decided_by, policy_version=r.policy_version,
                catalog_version=r.catalog_version, settings_fingerprint=r.settings_fingerprint,
            )
            for r in rows
        ]
