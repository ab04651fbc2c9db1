"""The blast-radius ledger: limit checks and the intents they allow, decided one at a time.

Place: used by ``AuditStore.reserve_limits`` inside its transaction; the engine's
``_blast_limit`` gives the decision (``policy.blast_radius``), the executor asks before the first
step of an Action generation.

Why: a check that counted only completed action rows let recoveries decided in the same round miss
each other (N jobs failing together under ``maxActionsPerHour: 2`` saw 3 of N carried out). Here the
check and the reservation of what it allowed are one serialised decision: the transaction first
locks one row of the ``controls`` table (``LEDGER``; an UPDATE takes the row's write lock on
PostgreSQL and MariaDB and the writer lock on SQLite, across every shard and replica), then reads
the window and the reservations in flight, decides, and records the reservation before it commits.
A reservation counts until its generation has an outcome (its action rows count from then on) or
leaves the window; a generation that asks again (resumed after a restart) gets its recorded answer.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from trainguard.model import actions, limits
from trainguard.store import tables

LEDGER = "blast-radius-ledger"
"""The ``controls`` row locked by every limit decision; its value holds the reservations in flight."""


@dataclasses.dataclass(frozen=True, slots=True)
class Reservation:
    """What one allowed advice generation may still do: counted by every later decision until its
    generation is closed (then its action rows count) or ``at`` leaves the window."""

    workload: str
    attempt: int
    generation: int
    at: float
    operations: list[str]
    """One entry per counted operation (``blast_radius.planned_operations``)."""
    drains: list[str]
    """Nodes it will take out of service (counted as out of service by us)."""
    report: dict[str, Any]
    """The decision (``LimitReport`` as JSON), returned as it is when the generation asks again."""

    @property
    def key(self) -> str:
        return key_of(self.workload, self.attempt, self.generation)

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    """A limit decision: the report, and what it reserves when it allows the advice."""

    report: limits.LimitReport
    operations: list[str]
    drains: list[str]


Decide = Callable[[Sequence[actions.ActionRecord], Sequence[Reservation]], Awaitable[Decision]]
"""Given the action rows of the window and the reservations in flight (other generations), decide."""


def key_of(workload: str, attempt: int, generation: int) -> str:
    return f"{workload}\x1f{attempt}\x1f{generation}"


async def lock(session: AsyncSession, when: datetime.datetime) -> tables.ControlRow:
    """Take the ledger row's write lock (created on first use; a concurrent creation raises
    ``IntegrityError``, retried by the caller) and return it."""
    update = (sa.update(tables.ControlRow).where(tables.ControlRow.name == LEDGER).values(updated_at=when)
              .execution_options(synchronize_session=False))
    if (await session.execute(update)).rowcount != 1:  # type: ignore[attr-defined]
        session.add(tables.ControlRow(name=LEDGER, value={"reserved": []}, updated_by="trainguard", updated_at=when))
        await session.flush()
    row = await session.get(tables.ControlRow, LEDGER, populate_existing=True)
    assert row is not None
    return row


async def in_flight(session: AsyncSession, row: tables.ControlRow, since: float) -> list[Reservation]:
    """The row's reservations still counting: inside the window and not yet closed by an outcome."""
    kept = [Reservation(**entry) for entry in row.value.get("reserved", []) if float(entry["at"]) > since]
    if not kept:
        return []
    closed_query = (sa.select(tables.AdviceRow.workload, tables.AdviceRow.attempt, tables.AdviceRow.generation)
                    .join(tables.OutcomeRow, tables.OutcomeRow.advice_id == tables.AdviceRow.id)
                    .where(tables.AdviceRow.workload.in_(sorted({r.workload for r in kept}))))
    closed = {key_of(w, a, g) for w, a, g in (await session.execute(closed_query)).all()}
    return [r for r in kept if r.key not in closed]


def window_rows(rows: Sequence[tables.ActionRow], live: Sequence[Reservation]) -> list[tables.ActionRow]:
    """Action rows that count besides the reservations: a generation still reserved counts by its
    reservation, not by its rows (never twice)."""
    reserved = {r.key for r in live}
    return [r for r in rows if key_of(r.workload, r.attempt, r.generation) not in reserved]
