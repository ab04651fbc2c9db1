"""Action rows: each step of a recovery, committed as an intent before the scheduler is touched.

Place: with ``recoveries``, the ``act.ports.Ledger`` of the executor. ``begin_action`` is fenced
(``leases.check_fence``) and idempotent (a step begun before a crash is resumed, not repeated);
``finish_action`` keeps the first result. Also here: what our own actions were seen to do
(``record_effect``) and somebody else's decisions left alone (``record_not_ours``).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from trainguard.model import actions, lifecycle, times, vocab
from trainguard.store import leases, nodes, records, recoveries, sessions, tables


class ActionStore(sessions.StoreBase):
    """Action-step rows (see the module docstring)."""

    @staticmethod
    def _action_query(workload: str, attempt: int, generation: int) -> sa.Select[Any]:
        return sa.select(tables.ActionRow).where(
            tables.ActionRow.workload == workload, tables.ActionRow.attempt == attempt,
            tables.ActionRow.generation == generation,
        )

    def _log_action(self, session: AsyncSession, row: tables.ActionRow, at: float, action: str,
                    resumed_from: str | None = None) -> None:
        payload: dict[str, Any] = {
            "operation": row.operation, "step": row.step, "status": row.status, "arguments": dict(row.args),
            "generation": row.generation, "action": action, "error": row.error,
        }
        if row.fence:
            payload["fence"] = row.fence
        if resumed_from is not None:
            payload["resumed_from"] = resumed_from
        self._log(session, at=at, workload=row.workload, attempt=row.attempt, kind=vocab.AuditKind.ACTION,
                  payload=payload, decided_by=row.decided_by)

    async def begin_action(
        self, record: actions.ActionRecord, *, at: float, fence: actions.FenceToken | None = None,
    ) -> actions.ActionRecord:
        """Commit a step's row (normally status ``intent``) before the scheduler is touched.

        If the (workload, attempt, generation, step) row already exists, it is returned
        unchanged: the caller resumes from it instead of repeating the step. With ``fence``, the
        token is checked first, in the same transaction: a token that is not the latest claim of its
        lease raises ``actions.FencedError`` and nothing is written (nor resumed).
        """

        async def work(session: AsyncSession) -> actions.ActionRecord:
            if fence is not None:
                await leases.check_fence(session, fence, at)
            query = self._action_query(record.workload, record.attempt, record.generation)
            existing = (await session.execute(query.where(tables.ActionRow.step == record.step))).scalar_one_or_none()
            if existing is not None:
                token = fence.describe() if fence is not None else None
                if token and existing.status == actions.ActionStatus.INTENT.value and existing.fence != token:
                    # A new leader resumes an intent begun under another token: the row now carries
                    # the token it is carried out under, and the stream says whose intent it took over.
                    previous = existing.fence or "standalone"
                    existing.fence, existing.updated_at = token, times.to_datetime(at)
                    advice_of = await session.get(tables.AdviceRow, existing.advice_id)
                    self._log_action(session, existing, at, advice_of.action if advice_of is not None else "",
                                     resumed_from=previous)
                    await session.flush()
                return records.action_record(existing)
            advice_row = (await session.execute(
                recoveries.advice_query(record.workload, record.attempt, record.generation))).scalar_one_or_none()
            if advice_row is None:
                raise LookupError(f"no advice {record.workload} attempt {record.attempt} "
                                  f"generation {record.generation}: the advice is written before any action")
            when = times.to_datetime(at)
            row = tables.ActionRow(
                advice_id=advice_row.id, workload=record.workload, attempt=record.attempt,
                generation=record.generation, step=record.step, operation=record.operation.value,
                args=dict(record.args), status=record.status.value, error=record.error,
                decided_by=record.decided_by.value, created_at=when, updated_at=when,
                fence=fence.describe() if fence is not None else None,
            )
            session.add(row)
            self._log_action(session, row, at, advice_row.action)
            await session.flush()
            return records.action_record(row)

        return await self._transaction(work)

    async def finish_action(
        self, *, workload: str, attempt: int, generation: int, step: str, status: actions.ActionStatus,
        at: float, error: str = "", result: dict[str, Any] | None = None,
    ) -> actions.ActionRecord:
        """Record a step's result. A row that already has a result keeps it (first result wins).

        ``result`` is merged into the row's arguments (e.g. how a hold we placed looks, which a
        later release compares against)."""

        async def work(session: AsyncSession) -> actions.ActionRecord:
            query = self._action_query(workload, attempt, generation).where(tables.ActionRow.step == step)
            row = (await session.execute(query)).scalar_one_or_none()
            if row is None:
                raise LookupError(f"no action intent {workload} attempt {attempt} generation {generation} {step}")
            if row.status != actions.ActionStatus.INTENT.value:
                return records.action_record(row)
            row.status, row.error, row.updated_at = status.value, error, times.to_datetime(at)
            if result:
                row.args = {**row.args, **result}
            advice_row = await session.get(tables.AdviceRow, row.advice_id)
            self._log_action(session, row, at, advice_row.action if advice_row is not None else "")
            if status is actions.ActionStatus.DONE:
                await _lifecycle_of(session, row, at)
            await session.flush()
            return records.action_record(row)

        return await self._transaction(work)

    async def actions_for(self, workload: str, attempt: int, generation: int) -> list[actions.ActionRecord]:
        """Every step row of one advice generation, in the order they were begun."""
        async with self._sessions() as session:
            query = self._action_query(workload, attempt, generation).order_by(tables.ActionRow.id)
            return [records.action_record(row) for row in (await session.execute(query)).scalars().all()]

    async def actions_of(self, workload: str) -> list[actions.ActionRecord]:
        """Every action row of ``workload`` (all attempts and generations), in the order they were
        begun: what we did to it, which tells a person's change from ours (``act.whose``)."""
        query = sa.select(tables.ActionRow).where(tables.ActionRow.workload == workload).order_by(tables.ActionRow.id)
        async with self._sessions() as session:
            return [records.action_record(row) for row in (await session.execute(query)).scalars().all()]

    async def own_exclusions(self, workload: str) -> list[str]:
        """The nodes Trainguard itself added to ``workload``'s exclusions, from its own action rows.

        An ``exclude_nodes`` row records the whole desired list (the user's own ``--exclude`` is
        kept in it) and, as ``added_nodes``, the nodes that step added to what the job already had.
        Only those count against ``maxExcludedNodesPerJob``: the user's exclusions are theirs. A
        row without ``added_nodes`` (older releases) counts in full. Rows still at ``intent``
        count too: the call may have taken effect before a crash.
        """
        counted = (actions.ActionStatus.DONE.value, actions.ActionStatus.INTENT.value)
        query = (sa.select(tables.ActionRow).where(
            tables.ActionRow.workload == workload,
            tables.ActionRow.operation == actions.Operation.EXCLUDE_NODES.value,
            tables.ActionRow.status.in_(counted)).order_by(tables.ActionRow.id))
        nodes: dict[str, None] = {}
        async with self._sessions() as session:
            for row in (await session.execute(query)).scalars().all():
                args = dict(row.args)
                added = args.get("added_nodes", args.get("excluded_nodes", []))
                nodes.update(dict.fromkeys(str(node) for node in added or []))
        return list(nodes)

    async def actions_by_operation(
        self, operations: list[actions.Operation], *, since: float | None = None,
    ) -> list[actions.ActionRecord]:
        """Action rows of the given operations across all workloads (hold scans, blast radius)."""
        query = sa.select(tables.ActionRow).where(tables.ActionRow.operation.in_([op.value for op in operations]))
        if since is not None:
            query = query.where(tables.ActionRow.created_at >= times.to_datetime(since))
        async with self._sessions() as session:
            return [records.action_record(row) for row in (await session.execute(query.order_by(tables.ActionRow.id)))
                    .scalars().all()]

    async def record_effect(self, *, workload: str, attempt: int, payload: dict[str, object], at: float) -> None:
        """What one of our own actions was seen to do (``detect.own_actions``): an ``action`` record with
        status ``effect``, written instead of an anomaly, so our own requeue's kill lines are not a failure."""

        async def work(session: AsyncSession) -> None:
            self._log(session, at=at, workload=workload, attempt=attempt, kind=vocab.AuditKind.ACTION,
                      payload=payload, decided_by="detector")

        await self._transaction(work)

    async def record_not_ours(self, *, workload: str, attempt: int, payload: dict[str, object], at: float) -> None:
        """Somebody else's decision about the workload (``act.whose``: a person's cancel, requeue or hold,
        the scheduler's time limit or preemption), seen and left alone: an ``action`` record with status
        ``not-ours``, decided by the scheduler's record, written instead of acting."""

        async def work(session: AsyncSession) -> None:
            await sessions.ensure_workload(session, workload, at)
            self._log(session, at=at, workload=workload, attempt=attempt, kind=vocab.AuditKind.ACTION,
                      payload=payload, decided_by="scheduler")

        await self._transaction(work)


async def _lifecycle_of(session: AsyncSession, row: tables.ActionRow, at: float) -> None:
    """The node lifecycle's transitions of a step that is done: our drain or cluster-wide exclusion
    takes its nodes out of service, our resume puts its node back (``model.lifecycle``)."""
    where = f"{row.workload} attempt {row.attempt} generation {row.generation}"
    if row.operation == actions.Operation.RESUME_NODE.value and row.args.get("node"):
        who = str(row.args.get("requested_by") or "")
        why = ("undone by " + who if who else "validation passed" if row.args.get("validated")
               else "undrainAfter passed")
        reason = f"resumed: {why} (our drain for {where})"
        await nodes.advance_in(session, str(row.args["node"]), lifecycle.NodeEvent.RESUMED, at=at, reason=reason,
                               workload=row.workload, attempt=row.attempt, evidence={"step": row.step})
        return
    for node in lifecycle.nodes_out(row.operation, row.args):
        verb = "drained" if row.operation == actions.Operation.DRAIN_NODE.value else "excluded (cordon and taint)"
        await nodes.advance_in(session, node, lifecycle.NodeEvent.TAKEN_OUT, at=at, reason=f"{verb} by us for {where}",
                               workload=row.workload, attempt=row.attempt, evidence={"step": row.step})

