"""Scorecard snapshots (migration 0010): what the scheduler showed after a Monitor-mode advice.

Place: beside ``audit.py``, over the same database engine (``AuditStore.sql_engine``). Written by the
engine's scorecard watch, read by ``trainguard scorecard``; plain values in and out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

from trainguard.store import audit, tables


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """One read of the scheduler for one advised (workload, attempt)."""

    workload: str
    attempt: int
    at: float
    job_state: str
    """The job's state, or ``GONE`` once the scheduler no longer knows the job."""
    restarts: int | None = None
    excluded_nodes: tuple[str, ...] = ()
    job_nodes: tuple[str, ...] = ()
    nodes: Mapping[str, Mapping[str, str]] = dataclasses.field(default_factory=dict)
    """Blamed node -> ``{"state", "reason"}`` as the scheduler showed it."""


class Snapshots:
    """The scorecard_snapshots table."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._sessions = async_sessionmaker(engine, expire_on_commit=False)

    async def record(self, snapshot: Snapshot) -> None:
        """Append one snapshot; the workload row exists (its advice was recorded first)."""
        async with self._sessions() as session, session.begin():
            session.add(tables.ScorecardSnapshotRow(
                workload=snapshot.workload, attempt=snapshot.attempt, job_state=snapshot.job_state,
                restarts=snapshot.restarts, excluded_nodes=list(snapshot.excluded_nodes),
                job_nodes=list(snapshot.job_nodes), nodes={k: dict(v) for k, v in snapshot.nodes.items()},
                at=audit.to_datetime(snapshot.at),
            ))

    async def of(self, workloads: Sequence[str]) -> dict[str, list[Snapshot]]:
        """The snapshots of ``workloads``, oldest first, by workload."""
        if not workloads:
            return {}
        query = (sa.select(tables.ScorecardSnapshotRow).where(tables.ScorecardSnapshotRow.workload.in_(workloads))
                 .order_by(tables.ScorecardSnapshotRow.id))
        found: dict[str, list[Snapshot]] = {}
        async with self._sessions() as session:
            try:
                rows = (await session.execute(query)).scalars().all()
            except sa.exc.DBAPIError:  # a database not yet migrated to 0010 (read-only viewers never migrate)
                return {}
            for row in rows:
                found.setdefault(row.workload, []).append(Snapshot(
                    workload=row.workload, attempt=row.attempt, at=audit.to_epoch(row.at), job_state=row.job_state,
                    restarts=row.restarts, excluded_nodes=tuple(str(n) for n in row.excluded_nodes or ()),
                    job_nodes=tuple(str(n) for n in row.job_nodes or ()),
                    nodes={str(k): {"state": str(v.get("state", "")), "reason": str(v.get("reason", ""))}
                           for k, v in (row.nodes or {}).items() if isinstance(v, dict)},
                ))
        return found
