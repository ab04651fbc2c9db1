"""Read side of goodput accounting: the per-attempt facts ``observe.goodput`` turns into time.

Place: beside ``queries.py`` (read-only, plain values out, no ORM object leaves ``store/``). It
reads only what the loop already records: attempts (start, end, state, nodes, last checkpoint),
the first anomaly of each attempt (when its initiating line was written and when it was
recorded), the latest verdict (category, nodes), the first advice and the first requeue action.
A handful of queries per call, each over the whole selection, so a report over thousands of
workloads costs a few round trips, not a few per workload.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

from trainguard.store import tables

REQUEUE_OPERATIONS = ("requeue", "requeue_hold")
"""Action operations that put a job back in the queue (``model.actions.Operation``)."""


@dataclasses.dataclass(frozen=True)
class AttemptFacts:
    """What the audit store knows of one attempt, as epoch seconds (None: not recorded)."""

    workload: str
    policy: str
    attempt: int
    state: str
    started_at: float | None
    ended_at: float | None
    nodes: tuple[str, ...]
    last_checkpoint_at: float | None
    anomaly_symptom: str | None = None
    anomaly_category: str | None = None
    onset_at: float | None = None
    """When the first anomaly's initiating line was written (its ``first_seen_at``)."""
    detected_at: float | None = None
    """When the first anomaly was recorded."""
    anomaly_nodes: tuple[str, ...] = ()
    verdict_category: str | None = None
    verdict_nodes: tuple[str, ...] = ()
    advised_at: float | None = None
    advice_action: str | None = None
    advice_mode: str | None = None
    requeued_at: float | None = None
    """When Trainguard began its first requeue of this attempt (the intent's time)."""


def _epoch(when: datetime.datetime | None) -> float | None:
    return None if when is None else when.timestamp()


def _checkpoint(value: Any) -> float | None:
    """``last_checkpoint_at`` through ``sa.null()`` on an old database comes back untyped (None)."""
    return value.timestamp() if isinstance(value, datetime.datetime) else None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _names(value: Any) -> tuple[str, ...]:
    return tuple(str(n) for n in value) if isinstance(value, list) else ()


def _picked(table: Any, pick: Any, chunk: list[str], *columns: Any, where: tuple[Any, ...] = ()) -> sa.Select[Any]:
    """One row per (workload, attempt) of ``table`` for the workloads of ``chunk``: the row whose id is
    ``pick`` (min: the first, max: the latest), with only ``columns`` (JSON fields are extracted by the
    database, so large payloads such as evidence lines are never transferred)."""
    ids = (sa.select(pick(table.id)).where(table.workload.in_(chunk), *where)
           .group_by(table.workload, table.attempt))
    return sa.select(table.workload, table.attempt, *columns).where(table.id.in_(ids))


async def attempt_facts(engine: AsyncEngine, *, since: datetime.datetime | None = None) -> list[AttemptFacts]:
    """Every recorded attempt (of every workload) that was still running at ``since`` or started later,
    ordered by workload and attempt number."""
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    a, w = tables.Attempt, tables.Workload
    an, v, ad, ac = tables.AnomalyRow, tables.VerdictRow, tables.AdviceRow, tables.ActionRow
    async with engine.connect() as conn:
        migrated = await conn.run_sync(
            lambda sync: "last_checkpoint_at" in {c["name"] for c in sa.inspect(sync).get_columns("attempts")})
    # A database not yet migrated to 0009 (read-only viewers never migrate) has no checkpoint times.
    checkpoint = a.last_checkpoint_at if migrated else sa.null().label("last_checkpoint_at")
    query = sa.select(a.workload, a.attempt, a.state, a.started_at, a.ended_at, a.nodes, checkpoint, w.policy
                      ).join(w, w.id == a.workload)
    if since is not None:
        query = query.where(sa.or_(a.ended_at.is_(None), a.ended_at >= since))
    query = query.order_by(a.workload, a.attempt)
    Key = tuple[str, int]
    async with sessions() as session:
        rows = (await session.execute(query)).all()
        names = sorted({row.workload for row in rows})
        anomalies: dict[Key, Any] = {}
        verdicts: dict[Key, Any] = {}
        advice: dict[Key, Any] = {}
        requeues: dict[Key, Any] = {}
        for chunk in (names[i:i + 500] for i in range(0, len(names), 500)):
            found = await session.execute(_picked(
                an, sa.func.min, chunk, an.symptom, an.category, an.at,
                an.payload["first_seen_at"].label("first_seen_at"), an.payload["suspect_nodes"].label("suspects")))
            anomalies.update({(r.workload, r.attempt): r for r in found})
            found = await session.execute(_picked(v, sa.func.max, chunk, v.category,
                                                  v.payload["suspect_nodes"].label("suspects")))
            verdicts.update({(r.workload, r.attempt): r for r in found})
            found = await session.execute(_picked(ad, sa.func.min, chunk, ad.created_at, ad.action, ad.mode))
            advice.update({(r.workload, r.attempt): r for r in found})
            found = await session.execute(_picked(ac, sa.func.min, chunk, ac.created_at, where=(
                ac.operation.in_(REQUEUE_OPERATIONS), ac.status == "done")))
            requeues.update({(r.workload, r.attempt): r for r in found})
    facts = []
    for row in rows:
        key = (row.workload, row.attempt)
        first, verdict, given, requeue = anomalies.get(key), verdicts.get(key), advice.get(key), requeues.get(key)
        detected = _epoch(first.at) if first is not None else None
        onset = _float(first.first_seen_at) if first is not None else None
        facts.append(AttemptFacts(
            workload=row.workload, policy=str(row.policy or ""), attempt=row.attempt, state=row.state,
            started_at=_epoch(row.started_at), ended_at=_epoch(row.ended_at),
            nodes=_names(row.nodes), last_checkpoint_at=_checkpoint(row.last_checkpoint_at),
            anomaly_symptom=first.symptom if first is not None else None,
            anomaly_category=first.category if first is not None else None,
            onset_at=(onset if onset is not None else detected) if first is not None else None,
            detected_at=detected,
            anomaly_nodes=_names(first.suspects) if first is not None else (),
            verdict_category=verdict.category if verdict is not None else None,
            verdict_nodes=_names(verdict.suspects) if verdict is not None else (),
            advised_at=_epoch(given.created_at) if given is not None else None,
            advice_action=given.action if given is not None else None,
            advice_mode=given.mode if given is not None else None,
            requeued_at=_epoch(requeue.created_at) if requeue is not None else None,
        ))
    return facts
