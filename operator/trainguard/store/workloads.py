"""Tracked workloads and their attempts: registration, state, placement, history, incarnations.

Place: the part of ``store.audit.AuditStore`` discovery and tracking write (``upsert_workload``,
``record_attempt``) and a restarted engine reads back (``attempt_facts``: the policy's per-workload
history; ``known_workloads``: which new workloads have anything to resume). ``retire_incarnation``
moves a deleted-and-recreated object's history aside, so the newcomer starts fresh.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Sequence
from typing import Final

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from trainguard.model import actions, times, vocab
from trainguard.store import records, recoveries, sessions, tables


class WorkloadStore(sessions.StoreBase):
    """Workload and attempt rows (see the module docstring)."""

    async def upsert_workload(
        self, *, workload: str, scheduler: str, job_id: str, at: float, policy: str = "", comment: str = "",
        opt_in_errors: Iterable[str] = (), state: str = "", incarnation: str = "",
    ) -> None:
        """Create or refresh a tracked workload (first_seen is kept, last_seen moves; an empty
        ``incarnation`` keeps the stored one)."""

        item = _WorkloadWrite(workload, scheduler, job_id, at, policy, comment, list(opt_in_errors), state, incarnation)

        async def work(session: AsyncSession) -> None:
            _upsert(session, await session.get(tables.Workload, workload), item)

        await self._transaction(work, bulk=(_upsert_many, item))

    async def retire_incarnation(self, workload: str, *, incarnation: str, at: float) -> str | None:
        """A new object under ``workload``'s id (``incarnation`` differs from the stored one): move
        the predecessor's history to a retired id and return that id; None when there is nothing to
        retire (unknown workload, same or first recorded incarnation).

        Every row keyed by the workload (attempts, anomalies, verdicts, advice, actions, outcomes,
        node incidents, read positions, scorecard snapshots, journal) moves, so the newcomer starts
        with no retries used, no advised attempt and no read position of the old one's, and goodput
        and the scorecard count the two apart. The predecessor's recoveries still open are closed
        (Abandoned). The audit log is append-only and stays under the id it was written with; a
        ``watchdog`` record there names the retired id."""

        async def work(session: AsyncSession) -> str | None:
            row = await session.get(tables.Workload, workload)
            if row is None or not incarnation or row.incarnation == incarnation:
                return None
            if not row.incarnation:  # tracked before incarnations were recorded: nothing to tell apart
                row.incarnation = incarnation
                return None
            previous = row.incarnation
            retired = _retired_id(workload, previous)
            suffix = 1
            while await session.get(tables.Workload, retired) is not None:
                retired, suffix = _retired_id(workload, f"{previous}.{suffix}"), suffix + 1
            session.add(tables.Workload(
                id=retired, scheduler=row.scheduler, job_id=row.job_id, policy=row.policy, comment=row.comment,
                opt_in_errors=list(row.opt_in_errors), state=row.state, first_seen=row.first_seen,
                last_seen=row.last_seen, incarnation=previous))
            await session.flush()
            detail = f"the workload was deleted and created again (object {incarnation}): not carried out"
            advice_rows = (await session.execute(
                sa.select(tables.AdviceRow).where(tables.AdviceRow.workload == workload))).scalars().all()
            for item in advice_rows:
                if item.disposition == vocab.Disposition.PENDING.value:
                    recoveries.add_outcome(self, session, item, actions.OutcomeRecord(
                        workload=workload, attempt=item.attempt, generation=item.generation,
                        disposition=vocab.Disposition.ABANDONED, detail=detail, decided_by=vocab.Decider.WATCHDOG,
                        at=at))
                item.payload = {**item.payload, "workload": retired}
            await session.flush()
            for table in _RETIRED_WITH_THE_WORKLOAD:
                await session.execute(sa.update(table).where(table.workload == workload).values(workload=retired)
                                      .execution_options(synchronize_session=False))
            row.incarnation = incarnation
            self._log(session, at=at, workload=workload, attempt=None, kind=vocab.AuditKind.WATCHDOG,
                      payload={"reason": f"a new object under this id (uid {incarnation}): the history of the "
                                         f"previous one (uid {previous}) continues as {retired}",
                               "retired_as": retired, "previous_incarnation": previous, "incarnation": incarnation},
                      decided_by=vocab.Decider.WATCHDOG.value)
            return retired

        return await self._transaction(work)

    async def set_workload_state(self, workload: str, state: str, *, at: float) -> None:
        """The scheduler's current state of a tracked workload, as the API and console list it."""

        async def work(session: AsyncSession) -> None:
            row = await session.get(tables.Workload, workload)
            if row is not None:
                row.state, row.last_seen = state, times.to_datetime(at)

        await self._transaction(work)

    async def get_workload(self, workload: str) -> records.WorkloadRecord | None:
        async with self._sessions() as session:
            row = await session.get(tables.Workload, workload)
            if row is None:
                return None
            return records.WorkloadRecord(
                id=row.id, scheduler=row.scheduler, job_id=row.job_id, policy=row.policy, comment=row.comment,
                opt_in_errors=list(row.opt_in_errors), state=row.state,
                first_seen=times.to_epoch(row.first_seen), last_seen=times.to_epoch(row.last_seen),
                incarnation=row.incarnation,
            )

    async def job_id_of(self, workload: str) -> str | None:
        """The scheduler's job id for a tracked workload (None if unknown or not recorded)."""
        record = await self.get_workload(workload)
        return record.job_id if record is not None and record.job_id else None

    async def record_attempt(
        self, *, workload: str, attempt: int, at: float, started_at: float | None = None,
        ended_at: float | None = None, checkpoint_saved: bool | None = None, state: str | None = None,
        nodes: Sequence[str] | None = None, checkpoint_at: float | None = None,
    ) -> None:
        """Create or update one attempt; fields left None keep their stored value.

        ``checkpoint_at`` (a checkpoint line's time) moves ``last_checkpoint_at`` forward only.

        ``nodes`` (where the scheduler placed the attempt) is merged into what is stored, never
        replaced: a node the attempt ran on stays part of the workload's allocation.
        """

        item = _AttemptWrite(workload, attempt, at, started_at, ended_at, checkpoint_saved, state, nodes, checkpoint_at)

        async def work(session: AsyncSession) -> None:
            await sessions.ensure_workload(session, workload, at)
            query = sa.select(tables.Attempt).where(tables.Attempt.workload == workload,
                                                    tables.Attempt.attempt == attempt)
            _apply_attempt(session, (await session.execute(query)).scalar_one_or_none(), item)

        await self._transaction(work, bulk=(_attempts_many, item))

    async def allocation(self, workload: str) -> list[str]:
        """Every node the scheduler placed an attempt of ``workload`` on, as recorded, in first-seen order."""
        async with self._sessions() as session:
            return await allocation_of(session, workload)

    async def known_workloads(self, workloads: Sequence[str]) -> set[str]:
        """Which of ``workloads`` the store has a row for (one query per 500): a workload it does not
        know has no history and no read positions to resume, so tracking it needs no other read."""
        found: set[str] = set()
        names = list(dict.fromkeys(workloads))
        async with self._sessions() as session:
            for start in range(0, len(names), 500):
                query = sa.select(tables.Workload.id).where(tables.Workload.id.in_(names[start:start + 500]))
                found.update((await session.execute(query)).scalars())
        return found

    async def attempt_facts(self, workload: str) -> list[records.AttemptHistory]:
        """Every recorded attempt of ``workload`` with its latest verdict and its advice, oldest first."""
        return (await self.attempt_facts_many([workload])).get(workload, [])

    async def attempt_facts_many(self, workloads: Sequence[str]) -> dict[str, list[records.AttemptHistory]]:
        """``attempt_facts`` of many workloads in three queries per 500 (not three per workload): a
        replica taking a shard over, or a restart, tracks thousands of known workloads at once."""
        names = list(dict.fromkeys(workloads))
        rows: list[tables.Attempt] = []
        verdicts: list[tables.VerdictRow] = []
        advice: list[tables.AdviceRow] = []
        async with self._sessions() as session:
            for start in range(0, len(names), 500):
                chunk = names[start:start + 500]
                rows.extend((await session.execute(sa.select(tables.Attempt).where(
                    tables.Attempt.workload.in_(chunk)).order_by(tables.Attempt.attempt))).scalars().all())
                verdicts.extend((await session.execute(sa.select(tables.VerdictRow).where(
                    tables.VerdictRow.workload.in_(chunk)).order_by(tables.VerdictRow.id))).scalars().all())
                advice.extend((await session.execute(sa.select(tables.AdviceRow).where(
                    tables.AdviceRow.workload.in_(chunk)).order_by(
                    tables.AdviceRow.attempt, tables.AdviceRow.generation))).scalars().all())
        by_workload: dict[str, dict[int, tables.Attempt]] = {}
        for r in rows:
            by_workload.setdefault(r.workload, {})[r.attempt] = r
        latest: dict[str, dict[int, tables.VerdictRow]] = {}
        for v in verdicts:  # by id: the latest verdict of an attempt wins
            latest.setdefault(v.workload, {})[v.attempt] = v
        given: dict[str, dict[int, list[tuple[int, str, list[str]]]]] = {}
        for a in advice:
            exclusions = [str(n) for n in (a.payload or {}).get("exclude_nodes") or []]
            given.setdefault(a.workload, {}).setdefault(a.attempt, []).append((a.generation, a.action, exclusions))
        out: dict[str, list[records.AttemptHistory]] = {}
        for workload in names:
            mine, theirs, advised = by_workload.get(workload, {}), latest.get(workload, {}), given.get(workload, {})
            facts = []
            for number in sorted(set(mine) | set(theirs) | set(advised)):
                row, verdict = mine.get(number), theirs.get(number)
                facts.append(records.AttemptHistory(
                    attempt=number,
                    started_at=times.to_epoch(row.started_at) if row is not None and row.started_at is not None
                    else None,
                    ended_at=times.to_epoch(row.ended_at) if row is not None and row.ended_at is not None else None,
                    checkpoint_saved=bool(row.checkpoint_saved) if row is not None else False,
                    category=verdict.category if verdict is not None else None,
                    attribution=verdict.attribution if verdict is not None else None,
                    advice=advised.get(number, []),
                ))
            if facts:
                out[workload] = facts
        return out


@dataclasses.dataclass(frozen=True)
class _WorkloadWrite:
    """One ``upsert_workload``."""

    workload: str
    scheduler: str
    job_id: str
    at: float
    policy: str
    comment: str
    opt_in_errors: list[str]
    state: str
    incarnation: str


def _upsert(session: AsyncSession, row: tables.Workload | None, item: _WorkloadWrite) -> tables.Workload:
    when = times.to_datetime(item.at)
    if row is None:
        row = tables.Workload(id=item.workload, first_seen=when)
        session.add(row)
    row.scheduler, row.job_id, row.policy, row.comment = item.scheduler, item.job_id, item.policy, item.comment
    row.opt_in_errors, row.state, row.last_seen = list(item.opt_in_errors), item.state, when
    if item.incarnation:
        row.incarnation = item.incarnation
    return row


async def _upsert_many(session: AsyncSession, items: list[_WorkloadWrite]) -> None:
    """``upsert_workload`` of a group (``sessions.Bulk``): the rows in one query per 500, one flush."""
    rows = await _workload_rows(session, [item.workload for item in items])
    for item in items:
        rows[item.workload] = _upsert(session, rows.get(item.workload), item)
    await session.flush()


@dataclasses.dataclass(frozen=True)
class _AttemptWrite:
    """One ``record_attempt``."""

    workload: str
    attempt: int
    at: float
    started_at: float | None
    ended_at: float | None
    checkpoint_saved: bool | None
    state: str | None
    nodes: Sequence[str] | None
    checkpoint_at: float | None


def _apply_attempt(session: AsyncSession | None, row: tables.Attempt | None, item: _AttemptWrite) -> tables.Attempt:
    """``record_attempt``'s change to the stored attempt ``row`` (None: a new one, added to ``session``
    unless that is None: the caller inserts it)."""
    if row is None:
        row = tables.Attempt(workload=item.workload, attempt=item.attempt, checkpoint_saved=False, state="")
        if session is not None:
            session.add(row)
    if item.started_at is not None:
        row.started_at = times.to_datetime(item.started_at)
    if item.ended_at is not None:
        row.ended_at = times.to_datetime(item.ended_at)
    if item.checkpoint_saved is not None:
        row.checkpoint_saved = item.checkpoint_saved
    if item.state is not None:
        row.state = item.state
    if item.checkpoint_at is not None and (row.last_checkpoint_at is None
                                           or times.to_datetime(item.checkpoint_at) > row.last_checkpoint_at):
        row.last_checkpoint_at = times.to_datetime(item.checkpoint_at)
    if item.nodes:
        row.nodes = list(dict.fromkeys([*(row.nodes or []), *item.nodes]))
    return row


async def _attempts_many(session: AsyncSession, items: list[_AttemptWrite]) -> None:
    """``record_attempt`` of a group (``sessions.Bulk``): the workload rows ensured and the attempts
    read in one query per 500 workloads each, then one flush, instead of three round trips a write."""
    names = list(dict.fromkeys(item.workload for item in items))
    await sessions.ensure_workloads(session, [(item.workload, item.at) for item in items])
    rows: dict[tuple[str, int], tables.Attempt] = {}
    for start in range(0, len(names), sessions.IN_CHUNK):
        query = sa.select(tables.Attempt).where(tables.Attempt.workload.in_(names[start:start + sessions.IN_CHUNK]))
        rows.update({(r.workload, r.attempt): r for r in (await session.execute(query)).scalars()})
    new: dict[tuple[str, int], tables.Attempt] = {}
    for item in items:
        key = (item.workload, item.attempt)
        if key in rows:
            _apply_attempt(session, rows[key], item)
        else:
            new[key] = _apply_attempt(None, new.get(key), item)
    await session.flush()
    await sessions.insert_new(session, list(new.values()))


async def _workload_rows(session: AsyncSession, keys: Sequence[str]) -> dict[str, tables.Workload]:
    """The workload rows of ``keys`` (those that exist), one query per 500 keys."""
    names = list(dict.fromkeys(keys))
    rows: dict[str, tables.Workload] = {}
    for start in range(0, len(names), sessions.IN_CHUNK):
        query = sa.select(tables.Workload).where(tables.Workload.id.in_(names[start:start + sessions.IN_CHUNK]))
        rows.update({r.id: r for r in (await session.execute(query)).scalars()})
    return rows


async def allocation_of(session: AsyncSession, workload: str) -> list[str]:
    """Every node an attempt of ``workload`` was placed on, in first-seen order (in ``session``)."""
    query = (sa.select(tables.Attempt.nodes).where(tables.Attempt.workload == workload)
             .order_by(tables.Attempt.attempt))
    nodes: dict[str, None] = {}
    for value in (await session.execute(query)).scalars().all():
        nodes.update(dict.fromkeys(str(node) for node in value or []))
    return list(nodes)


_RETIRED_WITH_THE_WORKLOAD: Final = (
    tables.Attempt, tables.AnomalyRow, tables.VerdictRow, tables.AdviceRow, tables.ActionRow, tables.OutcomeRow,
    tables.NodeHistoryRow, tables.TailPositionRow, tables.ScorecardSnapshotRow, tables.JournalRow,
)
"""The tables whose rows of a workload move with its history when a new object takes its id
(``AuditStore.retire_incarnation``); the audit log is not among them: it is never rewritten."""


def _retired_id(workload: str, incarnation: str) -> str:
    """``WORKLOAD@UID``, within the id column's length (the workload part shortened, then hashed)."""
    retired = f"{workload}@{incarnation}"
    if len(retired) <= tables.ID_LEN:
        return retired
    digest = hashlib.sha256(retired.encode()).hexdigest()[:16]
    return f"{workload[: tables.ID_LEN - len(digest) - 2]}@{digest}"
