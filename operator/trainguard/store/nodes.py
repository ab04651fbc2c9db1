"""The node lifecycle rows (``model.lifecycle``): each node's transitions, the latest one its state.

Place: the part of ``store.audit.AuditStore`` behind ``trainguard nodes`` and ``/api/v1/nodes``, and
the writer every other part calls inside its own transaction (``advance_in``): a verdict naming a
placed node (``findings``), our drain, exclusion or resume done (``steps.finish_action``). So a state
and the record that caused it are committed together, or neither is.

A person's decision (``decide``: hold, return) is one transaction that locks the node's latest row
(``FOR UPDATE`` where the database has it), checks the transition, and writes the row and its audit
record (kind ``action``, decided by the channel, with who it was).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from trainguard.model import lifecycle, times, vocab
from trainguard.store import sessions, tables


def _transition(row: tables.NodeLifecycleRow) -> lifecycle.Transition:
    return lifecycle.Transition(
        node=row.node, state=lifecycle.NodeState(row.state), event=lifecycle.NodeEvent(row.event), reason=row.reason,
        by=row.by, at=times.to_epoch(row.at), workload=row.workload, attempt=row.attempt, evidence=dict(row.evidence))


async def _latest(session: AsyncSession, node: str, *, lock: bool) -> tables.NodeLifecycleRow | None:
    query = (sa.select(tables.NodeLifecycleRow).where(tables.NodeLifecycleRow.node == node)
             .order_by(tables.NodeLifecycleRow.id.desc()).limit(1))
    if lock:
        query = query.with_for_update()
    return (await session.execute(query)).scalars().first()


async def advance_in(
    session: AsyncSession, node: str, event: lifecycle.NodeEvent, *, at: float, reason: str, by: str = "trainguard",
    workload: str = "", attempt: int | None = None, evidence: dict[str, Any] | None = None, strict: bool = False,
) -> lifecycle.Transition | None:
    """Append the transition ``event`` of ``node`` in ``session``'s transaction; the new transition, or
    None when nothing changed (the same state again without news) or the lifecycle refused it and
    ``strict`` is off (a fact that does not move the node, e.g. a drain of a node a person holds)."""
    latest = await _latest(session, node, lock=strict)
    state = lifecycle.NodeState(latest.state) if latest is not None else lifecycle.NodeState.IN_SERVICE
    try:
        after = lifecycle.advance(state, event)
    except lifecycle.Refused:
        if strict:
            raise
        return None
    if latest is not None and after is state and latest.event == event.value and not strict:
        return None  # the same fact again (a second verdict of a suspect): one row is enough
    row = tables.NodeLifecycleRow(node=node[:255], state=after.value, event=event.value, reason=reason, by=by[:255],
                                  workload=workload[:255], attempt=attempt, evidence=dict(evidence or {}),
                                  at=times.to_datetime(at))
    session.add(row)
    await session.flush()
    return _transition(row)


class NodeStore(sessions.StoreBase):
    """Node lifecycle rows (see the module docstring)."""

    async def node_states(self) -> list[lifecycle.Transition]:
        """Each node's latest transition (its current state), by node name."""
        newest = (sa.select(sa.func.max(tables.NodeLifecycleRow.id)).group_by(tables.NodeLifecycleRow.node)
                  .scalar_subquery())
        query = sa.select(tables.NodeLifecycleRow).where(tables.NodeLifecycleRow.id.in_(newest))
        async with self._sessions() as session:
            rows = (await session.execute(query)).scalars().all()
            return sorted((_transition(r) for r in rows), key=lambda t: t.node)

    async def node_state(self, node: str) -> lifecycle.Transition | None:
        """The node's latest transition; None when the lifecycle has no row of it (in service)."""
        async with self._sessions() as session:
            row = await _latest(session, node, lock=False)
            return _transition(row) if row is not None else None

    async def node_transitions(self, node: str) -> list[lifecycle.Transition]:
        """Every transition of ``node``, oldest first (``trainguard nodes show``)."""
        query = (sa.select(tables.NodeLifecycleRow).where(tables.NodeLifecycleRow.node == node)
                 .order_by(tables.NodeLifecycleRow.id))
        async with self._sessions() as session:
            return [_transition(r) for r in (await session.execute(query)).scalars().all()]

    async def advance_node(
        self, node: str, event: lifecycle.NodeEvent, *, at: float, reason: str, workload: str = "",
        attempt: int | None = None, evidence: dict[str, Any] | None = None,
    ) -> lifecycle.Transition | None:
        """One of our rules' transitions on its own (a fresh read saw the node someone else's, or back):
        None when refused or nothing changed. Audited like every record."""

        async def work(session: AsyncSession) -> lifecycle.Transition | None:
            moved = await advance_in(session, node, event, at=at, reason=reason, workload=workload, attempt=attempt,
                                     evidence=evidence)
            if moved is not None:
                self._log_transition(session, moved, decided_by=vocab.Decider.POLICY_ENGINE.value)
            return moved

        return await self._transaction(work)

    async def decide_node(
        self, node: str, event: lifecycle.NodeEvent, *, by: str, channel: str, at: float, reason: str,
    ) -> lifecycle.Transition:
        """A person's decision on a node (``HELD`` or ``CLEARED``), recorded with who made it; raises
        ``lifecycle.Refused`` (nothing written) when the node's state does not allow it."""

        async def work(session: AsyncSession) -> lifecycle.Transition:
            moved = await advance_in(session, node, event, at=at, reason=reason, by=by, strict=True)
            assert moved is not None  # strict: a refusal raises
            self._log_transition(session, moved, decided_by=channel)
            return moved

        return await self._transaction(work)

    def _log_transition(self, session: AsyncSession, moved: lifecycle.Transition, *, decided_by: str) -> None:
        self._log(session, at=moved.at, workload=moved.workload, attempt=moved.attempt, kind=vocab.AuditKind.ACTION,
                  payload={"operation": f"node-{moved.event.value}", "status": "done", "node": moved.node,
                           "state": moved.state.value, "reason": moved.reason, "by": moved.by},
                  decided_by=decided_by)
