"""Cluster-wide controls and the blast-radius limits: the pause, the breaker, the limits ledger.

Place: the part of ``store.audit.AuditStore`` behind ``act.switch.Controls`` (``control``,
``set_control``) and the executor's limit check (``reserve_limits``, decided under the ledger's
controls row, ``store.ledger``). A breaker opened by a limit is latched in the same transaction.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncSession

from trainguard.model import actions, limits, times, vocab
from trainguard.store import leases, ledger, records, sessions, tables


class ControlStore(sessions.StoreBase):
    """Control rows and limit reservations (see the module docstring)."""

    async def control(self, name: str) -> records.ControlRecord | None:
        """The current value of a cluster-wide control (``set_control``), or None if never set."""
        async with self._sessions() as session:
            row = await session.get(tables.ControlRow, name)
            if row is None:
                return None
            return records.ControlRecord(name=row.name, value=dict(row.value), updated_by=row.updated_by,
                                         updated_at=times.to_epoch(row.updated_at))

    async def set_control(self, name: str, value: dict[str, Any], *, by: str, channel: str, at: float,
                          payload: dict[str, object]) -> records.ControlRecord:
        """Set a cluster-wide control and write its audit record (kind ``action``, no workload, decided
        by ``channel``: ``cli``, ``api``, ``kubernetes``) in one transaction."""

        async def work(session: AsyncSession) -> records.ControlRecord:
            row = await session.get(tables.ControlRow, name, with_for_update=True)
            if row is None:
                row = tables.ControlRow(name=name, value=dict(value), updated_by=by[:255],
                                        updated_at=times.to_datetime(at))
                session.add(row)
            else:
                row.value, row.updated_by, row.updated_at = dict(value), by[:255], times.to_datetime(at)
            self._log(session, at=at, workload="", attempt=None, kind=vocab.AuditKind.ACTION,
                      payload={**payload, "control": name, "by": by}, decided_by=channel)
            return records.ControlRecord(name=name, value=dict(value), updated_by=by, updated_at=at)

        return await self._transaction(work)

    async def reserve_limits(
        self, workload: str, attempt: int, generation: int, decide: ledger.Decide, *, at: float, since: float,
        fence: actions.FenceToken | None = None, breaker: str = "",
    ) -> limits.LimitReport:
        """Check the blast-radius limits of one advice generation and reserve what they allow, as one
        serialised decision (``store.ledger``): fenced like every mutation, under the ledger row's
        lock, counting the action rows since ``since`` (done, and intents in flight) and the
        reservations of generations not closed yet. A generation that asks again gets its recorded
        answer. When the report's blocking check is an administrator's cap, the ``breaker`` control
        is opened (latched; with an audit record) in the same transaction."""
        key = ledger.key_of(workload, attempt, generation)

        async def work(session: AsyncSession) -> limits.LimitReport:
            if fence is not None:
                await leases.check_fence(session, fence, at)
            when = times.to_datetime(at)
            row = await ledger.lock(session, when)
            earlier = next((e for e in row.value.get("reserved", []) if ledger.key_of(
                e["workload"], e["attempt"], e["generation"]) == key), None)
            if earlier is not None:
                return limits.LimitReport.model_validate(earlier["report"])
            live = await ledger.in_flight(session, row, since)
            counted = (actions.ActionStatus.DONE.value, actions.ActionStatus.INTENT.value)
            rows = (await session.execute(sa.select(tables.ActionRow).where(
                tables.ActionRow.created_at >= times.to_datetime(since), tables.ActionRow.status.in_(counted))
                .order_by(tables.ActionRow.id))).scalars().all()
            decision = await decide([records.action_record(r) for r in ledger.window_rows(rows, live)], live)
            report = decision.report
            if report.reason is None:
                live.append(ledger.Reservation(workload=workload, attempt=attempt, generation=generation, at=at,
                                               operations=decision.operations, drains=decision.drains,
                                               report=report.model_dump(mode="json")))
            row.value = {"reserved": [r.as_json() for r in live]}
            if report.breaker_reason and breaker:
                await self._open_breaker(session, breaker, report.breaker_reason, workload=workload, attempt=attempt,
                                         at=at)
            await session.flush()
            return report

        for _ in range(5):
            try:
                return await self._commit(work)
            except sa_exc.IntegrityError:
                continue  # another replica created the ledger row at the same time: decide again under it
        raise RuntimeError("could not lock the blast-radius ledger: five concurrent creations in a row")

    async def _open_breaker(self, session: AsyncSession, name: str, reason: str, *, workload: str, attempt: int,
                            at: float) -> None:
        """Latch the breaker open (it stays open until a person resets it); audited once per opening."""
        row = await session.get(tables.ControlRow, name, with_for_update=True)
        if row is not None and row.value.get("open"):
            return
        value = {"open": True, "reason": reason, "workload": workload}
        if row is None:
            session.add(tables.ControlRow(name=name, value=value, updated_by="trainguard",
                                          updated_at=times.to_datetime(at)))
        else:
            row.value, row.updated_by, row.updated_at = value, "trainguard", times.to_datetime(at)
        self._log(session, at=at, workload=workload, attempt=attempt, kind=vocab.AuditKind.ACTION,
                  payload={"operation": "breaker-open", "status": "done", "control": name, "reason": reason},
                  decided_by=vocab.Decider.POLICY_ENGINE.value)
