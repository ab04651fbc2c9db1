"""What detection and attribution found: anomalies, verdicts, lemon-node memory, pattern firings.

Place: the part of ``store.audit.AuditStore`` the decision stage writes (``record_anomaly``,
``record_verdict``) and node evidence, ``trainguard patterns`` and the console read
(``node_history``, ``fired_patterns``).
"""

from __future__ import annotations

import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from trainguard.model import anomalies, lifecycle, times, verdicts, vocab
from trainguard.store import nodes, records, sessions, tables, workloads

_NODE_FAULTS = frozenset({vocab.Attribution.HARDWARE, vocab.Attribution.SYSTEM, vocab.Attribution.UNKNOWN})
"""Attributions whose suspect nodes are remembered in node_history (lemon-node memory)."""


class FindingStore(sessions.StoreBase):
    """Anomaly, verdict and node-history rows (see the module docstring)."""

    async def record_anomaly(self, *, workload: str, attempt: int, anomaly: anomalies.Anomaly, at: float) -> None:
        payload = anomaly.model_dump(mode="json")

        async def work(session: AsyncSession) -> None:
            await sessions.ensure_workload(session, workload, at)
            session.add(tables.AnomalyRow(workload=workload, attempt=attempt, symptom=anomaly.symptom.value,
                                          category=anomaly.category.value, payload=payload, at=times.to_datetime(at)))
            self._log(session, at=at, workload=workload, attempt=attempt, kind=vocab.AuditKind.ANOMALY,
                      payload=payload, decided_by="detector")

        await self._transaction(work)

    async def record_verdict(
        self, *, workload: str, attempt: int, verdict: verdicts.Verdict, at: float,
    ) -> None:
        payload = verdict.model_dump(mode="json")
        payload["nodes"] = list(verdict.suspect_nodes)

        async def work(session: AsyncSession) -> None:
            await sessions.ensure_workload(session, workload, at)
            session.add(tables.VerdictRow(workload=workload, attempt=attempt, attribution=verdict.attribution.value,
                                          category=verdict.category.value, payload=payload, at=times.to_datetime(at)))
            # Lemon-node memory: only failures that can be the node's fault. An application bug
            # that always kills the same rank must not turn a healthy node into a lemon.
            if verdict.attribution in _NODE_FAULTS and verdict.suspect_nodes:
                await self._remember_nodes(session, workload, attempt, verdict, at)
            self._log(session, at=at, workload=workload, attempt=attempt, kind=vocab.AuditKind.VERDICT,
                      payload=payload, decided_by=verdict.source)

        await self._transaction(work)

    async def _remember_nodes(
        self, session: AsyncSession, workload: str, attempt: int, verdict: verdicts.Verdict, at: float
    ) -> None:
        """One node_history row per suspect per (workload, attempt), and only for nodes the scheduler
        placed one of the workload's attempts on: a host name read from log text (forged, copied,
        or another job's) never enters lemon memory, and a second verdict of the same attempt is
        the same incident, not a new one."""
        placed = set(await workloads.allocation_of(session, workload))
        query = sa.select(tables.NodeHistoryRow.node).where(
            tables.NodeHistoryRow.workload == workload, tables.NodeHistoryRow.attempt == attempt)
        known = set((await session.execute(query)).scalars().all())
        for node in dict.fromkeys(verdict.suspect_nodes):
            if node in placed and node not in known:
                session.add(tables.NodeHistoryRow(node=node, workload=workload, attempt=attempt,
                                                  category=verdict.category.value, at=times.to_datetime(at)))
            if node in placed:
                await nodes.advance_in(session, node, lifecycle.NodeEvent.NAMED, at=at, workload=workload,
                                       attempt=attempt, reason=f"named by a {verdict.category.value} verdict of "
                                       f"{workload} attempt {attempt}",
                                       evidence={"category": verdict.category.value,
                                                 "attribution": verdict.attribution.value})

    async def node_history(self, *, since: float) -> list[records.NodeImplication]:
        """Suspect-node implications recorded with verdicts since ``since`` (oldest first)."""
        query = (sa.select(tables.NodeHistoryRow).where(tables.NodeHistoryRow.at >= times.to_datetime(since))
                 .order_by(tables.NodeHistoryRow.id))
        async with self._sessions() as session:
            rows = (await session.execute(query)).scalars().all()
            return [records.NodeImplication(node=r.node, workload=r.workload, category=r.category,
                                            at=times.to_epoch(r.at), attempt=r.attempt or 0) for r in rows]

    async def fired_patterns(
        self, *, since: datetime.datetime | None = None, workload: str | None = None
    ) -> list[records.PatternFiring]:
        """Which patterns fired on which workloads: from every recorded anomaly's evidence (each
        pattern counted once per anomaly), most anomalies first, then by id."""
        query = sa.select(tables.AnomalyRow.workload, tables.AnomalyRow.payload, tables.AnomalyRow.at)
        if since is not None:
            query = query.where(tables.AnomalyRow.at >= since)
        if workload is not None:
            query = query.where(tables.AnomalyRow.workload == workload)
        counts: dict[str, dict[str, Any]] = {}
        async with self._sessions() as session:
            rows = (await session.execute(query.order_by(tables.AnomalyRow.id))).all()
        for name, payload, at in rows:
            evidence = [item for item in (payload or {}).get("evidence") or [] if isinstance(item, dict)]
            ids = [str(item["pattern"]) for item in evidence if item.get("pattern")]
            for index, pattern in enumerate(dict.fromkeys(ids)):
                entry = counts.setdefault(
                    pattern, {"anomalies": 0, "first_cause": 0, "workloads": {}, "first": at, "last": at}
                )
                entry["anomalies"] += 1
                entry["first_cause"] += 1 if index == 0 and ids[0] == pattern else 0
                entry["workloads"][name] = entry["workloads"].get(name, 0) + 1
                entry["first"], entry["last"] = min(entry["first"], at), max(entry["last"], at)
        found = [records.PatternFiring(pattern=pattern, **entry) for pattern, entry in counts.items()]
        return sorted(found, key=lambda f: (-f.anomalies, f.pattern))
