"""The audit repository: every record of the loop, durable before anything is done.

Place in the loop: the sink of every stage (anomaly, verdict, advice, action, outcome,
watchdog) and the memory of the executor (``act/``), which reads back its own action rows
after a restart to resume instead of repeating. Callers get plain pydantic values, never
ORM objects. Each write is one transaction that also appends to ``audit_log``, the unified
stream ``trainguard audit`` prints, so the stream and the tables cannot disagree.

Idempotence is enforced by unique keys (see ``tables``): writing an advice or an action
intent a second time returns what is already there instead of a duplicate. Errors are
raised, never swallowed: a record that cannot be written must stop the action it precedes.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import datetime
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import Any, Final, Protocol, TypeVar

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from trainguard.model import actions, advice, anomalies, limits, verdicts, vocab
from trainguard.store import ledger, tables

T = TypeVar("T")

logger = logging.getLogger(__name__)

_WRITTEN = "trainguard_audit_written"
"""Key in a session's ``info``: the audit records added in its transaction, told to observers on commit."""

_GROUPED: contextvars.ContextVar[bool] = contextvars.ContextVar("trainguard_store_grouped", default=False)
"""Set by ``AuditStore.grouped()``: this task's writes may share a commit with concurrent ones."""

GROUP_MAX = 512
"""Writes committed together at most (one transaction stays short enough for other writers)."""


@dataclasses.dataclass(frozen=True)
class Written:
    """One audit record, as committed: what observers (the engine's metrics) are told."""

    kind: str
    workload: str
    attempt: int | None
    payload: dict[str, Any]
    decided_by: str
    at: float
    """The record's time (the engine's clock)."""
    write_s: float
    """Wall time of the transaction that wrote it, from begin to commit."""


class AuditObserver(Protocol):
    """Told about every audit record after its transaction committed (never before: a record
    that was rolled back did not happen). Must be quick and must not raise; an error is logged
    and ignored, since observing must never stop the loop it observes."""

    def audit_written(self, record: Written) -> None: ...


@dataclasses.dataclass(frozen=True)
class AuditContext:
    """Versions written into every audit row, so a record can be traced to its configuration."""

    policy_version: str = ""
    catalog_version: str = ""
    settings_fingerprint: str = ""


class AuditRecord(BaseModel):
    """One record of the unified stream (``trainguard audit``)."""

    model_config = ConfigDict(frozen=True)

    id: int
    time: datetime.datetime
    workload: str
    attempt: int | None
    kind: vocab.AuditKind
    payload: dict[str, Any]
    decided_by: str
    policy_version: str = ""
    catalog_version: str = ""
    settings_fingerprint: str = ""

    def to_json(self) -> dict[str, Any]:
        """The contract shape: ``time`` is UTC ISO 8601 with microseconds and ``+00:00``."""
        data = self.model_dump(mode="json", exclude={"time"})
        data["time"] = iso_utc(self.time)
        return data


class WorkloadRecord(BaseModel):
    """A tracked workload as stored."""

    model_config = ConfigDict(frozen=True)

    id: str
    scheduler: str
    job_id: str
    policy: str
    comment: str
    opt_in_errors: list[str]
    state: str
    first_seen: float
    last_seen: float
    incarnation: str = ""


class NodeImplication(BaseModel):
    """A node named as a suspect, for lemon-node memory."""

    model_config = ConfigDict(frozen=True)

    node: str
    workload: str
    category: str
    at: float
    attempt: int = 0
    """The attempt that implicated the node (0 for rows older than migration 0004)."""


class PatternFiring(BaseModel):
    """How often one catalog entry fired, read from the recorded anomalies' evidence.

    ``anomalies`` counts the anomalies whose evidence cites the pattern, ``first_cause`` those
    whose initiating line (the first evidence item) it matched, ``workloads`` the anomalies per
    workload. Detector names (``progress``, ``hang.progress_silence``, ...) appear too: they are
    evidence patterns, though not catalog entries.
    """

    model_config = ConfigDict(frozen=True)

    pattern: str
    anomalies: int
    first_cause: int
    workloads: dict[str, int]
    first: datetime.datetime
    last: datetime.datetime

    def to_json(self) -> dict[str, Any]:
        data = self.model_dump(mode="json", exclude={"first", "last"})
        data["first"], data["last"] = iso_utc(self.first), iso_utc(self.last)
        return data


class TailRecord(BaseModel):
    """Where reading one output file of one attempt stands (``signals.resume`` explains ``basis``)."""

    model_config = ConfigDict(frozen=True)

    workload: str
    attempt: int
    path: str
    source: str = ""
    inode: int | None = None
    offset: int
    lineno: int = 0
    fingerprint: str = ""
    basis: str = ""


class AttemptFacts(BaseModel):
    """What the store knows of one attempt, enough for a restarted engine to rebuild the policy's
    per-workload history (retries, attempts without a checkpoint, exclusions, advice generations)."""

    model_config = ConfigDict(frozen=True)

    attempt: int
    started_at: float | None = None
    ended_at: float | None = None
    checkpoint_saved: bool = False
    category: str | None = None
    """The latest verdict's category and attribution for this attempt."""
    attribution: str | None = None
    advice: list[tuple[int, str, list[str]]] = Field(default_factory=list)
    """(generation, action, exclusions) of each advice for this attempt, oldest first."""


def path_key(path: str) -> str:
    """The fixed-length key of an output file path (the unique key must fit MySQL's index limit)."""
    return hashlib.sha256(path.encode("utf-8", errors="surrogateescape")).hexdigest()


def to_datetime(epoch: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC)


def to_epoch(when: datetime.datetime) -> float:
    return when.timestamp()


def iso_utc(when: datetime.datetime) -> str:
    """``2026-11-29T16:03:04.123456+00:00``: always UTC, always six fraction digits."""
    return when.astimezone(datetime.UTC).isoformat(timespec="microseconds")


def _action_record(row: tables.ActionRow) -> actions.ActionRecord:
    return actions.ActionRecord(
        workload=row.workload, attempt=row.attempt, generation=row.generation, step=row.step,
        operation=actions.Operation(row.operation), args=dict(row.args), status=actions.ActionStatus(row.status),
        error=row.error, decided_by=vocab.Decider(row.decided_by),
        created_at=to_epoch(row.created_at), updated_at=to_epoch(row.updated_at), fence=row.fence or "",
    )


def _outcome_record(row: tables.OutcomeRow) -> actions.OutcomeRecord:
    return actions.OutcomeRecord(
        workload=row.workload, attempt=row.attempt, generation=row.generation,
        disposition=vocab.Disposition(row.disposition), detail=row.detail,
        decided_by=vocab.Decider(row.decided_by), at=to_epoch(row.at),
    )


def advice_payload(item: advice.Advice) -> dict[str, Any]:
    """The advice as stored and as shown in the audit stream (``exclusions`` is the contract name)."""
    data = item.model_dump(mode="json")
    data["exclusions"] = list(item.exclude_nodes)
    return data


_NODE_FAULTS = frozenset({vocab.Attribution.HARDWARE, vocab.Attribution.SYSTEM, vocab.Attribution.UNKNOWN})
"""Attributions whose suspect nodes are remembered in node_history (lemon-node memory)."""


@dataclasses.dataclass(frozen=True, slots=True)
class ControlRecord:
    """A cluster-wide control as stored: its value, who set it last and when (epoch seconds)."""

    name: str
    value: dict[str, Any]
    updated_by: str
    updated_at: float


@dataclasses.dataclass(frozen=True, slots=True)
class LeaseRecord:
    """One lease's latest claim as a candidate observes it: who holds it (empty: released), its
    term, and when its holder last renewed it or fenced an intent with it (the holder's clock)."""

    holder: str
    term: int
    renewed_at: float


class _ClaimRaced(Exception):
    """Another replica claimed between our read and our conditional update (retried)."""


class AuditStore:
    """Async repository over one database. Create it with ``database.open_store``."""

    def __init__(self, engine: AsyncEngine, *, context: AuditContext) -> None:
        self._engine = engine
        self._sessions = async_sessionmaker(engine, expire_on_commit=False)
        self.context = context
        self.observers: list[AuditObserver] = []
        """Told about every committed audit record (``AuditObserver``)."""
        self._group: list[tuple[Callable[[AsyncSession], Awaitable[Any]], asyncio.Future[Any]]] = []
        self._group_writer: asyncio.Future[None] | None = None

    @property
    def backend(self) -> str:
        """``sqlite``, ``postgresql``, ``mysql`` or ``mariadb`` (a ``mariadb://`` URL)."""
        return self._engine.dialect.name

    @property
    def sql_engine(self) -> AsyncEngine:
        """The database engine, for the HTTP API's read-side queries (``store.queries``)."""
        return self._engine

    async def close(self) -> None:
        await self._engine.dispose()

    @contextlib.contextmanager
    def grouped(self) -> Iterator[None]:
        """Within this block, this task's writes are committed together with the concurrent writes
        of other tasks in the same block (group commit): tracking a thousand new workloads costs a
        few commits, not thousands of ``synchronous=FULL`` ones. Each caller still returns only
        once its write is committed. Only for writes that are idempotent and order-free across
        workloads (registering a workload, its allocation, its read positions): a caller cancelled
        while waiting may still see its write committed."""
        token = _GROUPED.set(True)
        try:
            yield
        finally:
            _GROUPED.reset(token)

    async def _transaction(self, work: Callable[[AsyncSession], Awaitable[T]]) -> T:
        if _GROUPED.get():
            return await self._grouped(work)
        return await self._commit(work)

    async def _grouped(self, work: Callable[[AsyncSession], Awaitable[T]]) -> T:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._group.append((work, future))
        if self._group_writer is None or self._group_writer.done():
            self._group_writer = asyncio.ensure_future(self._write_groups())
        result: T = await future
        return result

    async def _write_groups(self) -> None:
        """Commit the queued grouped writes, up to ``GROUP_MAX`` per transaction. When a group's
        transaction fails, each of its writes is retried alone, so that an error reaches its own
        caller only (and the others still commit)."""
        live: list[tuple[Callable[[AsyncSession], Awaitable[Any]], asyncio.Future[Any]]] = []
        try:
            while self._group:
                await asyncio.sleep(0)  # let the writers of this round join
                batch, self._group = self._group[:GROUP_MAX], self._group[GROUP_MAX:]
                live = [(w, f) for w, f in batch if not f.done()]
                if len(live) > 1:
                    works = [w for w, _ in live]

                    async def all_of(session: AsyncSession, works: list[Callable[[AsyncSession], Awaitable[Any]]]
                                     = works) -> list[Any]:
                        return [await w(session) for w in works]

                    try:
                        results = await self._commit(all_of)
                    except Exception:
                        logger.debug("a grouped commit of %d writes failed; writing them one by one", len(live))
                    else:
                        for (_, f), value in zip(live, results, strict=True):
                            if not f.done():
                                f.set_result(value)
                        continue
                for w, f in live:
                    try:
                        value = await self._commit(w)
                    except Exception as exc:
                        if not f.done():
                            f.set_exception(exc)
                    else:
                        if not f.done():
                            f.set_result(value)
        except BaseException as exc:
            for _, f in [*live, *self._group]:
                if not f.done():
                    f.set_exception(exc if isinstance(exc, Exception) else asyncio.CancelledError())
            self._group = []
            raise

    async def _commit(self, work: Callable[[AsyncSession], Awaitable[T]]) -> T:
        started = time.perf_counter()
        async with self._sessions() as session:
            async with session.begin():
                result = await work(session)
            written: list[tuple[tables.AuditLogRow, float]] = session.info.pop(_WRITTEN, [])
        if written and self.observers:
            self._tell(written, time.perf_counter() - started)
        return result

    def _tell(self, written: Sequence[tuple[tables.AuditLogRow, float]], seconds: float) -> None:
        for row, at in written:
            record = Written(kind=row.kind, workload=row.workload, attempt=row.attempt, payload=row.payload,
                             decided_by=row.decided_by, at=at, write_s=seconds)
            for observer in self.observers:
                try:
                    observer.audit_written(record)
                except Exception:
                    logger.exception("audit observer failed on a %s record", record.kind)

    def _log(
        self, session: AsyncSession, *, at: float, workload: str, attempt: int | None, kind: vocab.AuditKind,
        payload: dict[str, Any], decided_by: str,
    ) -> tables.AuditLogRow:
        """Append one record to ``audit_log`` in ``session``'s transaction; the observers are told
        of it once that transaction commits (``_commit``). Every audit row is written here."""
        row = tables.AuditLogRow(
            time=to_datetime(at), workload=workload, attempt=attempt, kind=kind.value, payload=payload,
            decided_by=decided_by, policy_version=self.context.policy_version,
            catalog_version=self.context.catalog_version, settings_fingerprint=self.context.settings_fingerprint,
        )
        session.add(row)
        if self.observers:
            session.info.setdefault(_WRITTEN, []).append((row, at))
        return row

    @staticmethod
    async def _ensure_workload(session: AsyncSession, workload: str, at: float) -> None:
        if await session.get(tables.Workload, workload) is None:
            when = to_datetime(at)
            session.add(tables.Workload(
                id=workload, scheduler="", job_id="", policy="", comment="", opt_in_errors=[], state="",
                first_seen=when, last_seen=when,
            ))
            await session.flush()

    # -- workloads and attempts -------------------------------------------------------------

    async def upsert_workload(
        self, *, workload: str, scheduler: str, job_id: str, at: float, policy: str = "", comment: str = "",
        opt_in_errors: Iterable[str] = (), state: str = "", incarnation: str = "",
    ) -> None:
        """Create or refresh a tracked workload (first_seen is kept, last_seen moves; an empty
        ``incarnation`` keeps the stored one)."""

        async def work(session: AsyncSession) -> None:
            row = await session.get(tables.Workload, workload)
            when = to_datetime(at)
            if row is None:
                row = tables.Workload(id=workload, first_seen=when)
                session.add(row)
            row.scheduler, row.job_id, row.policy, row.comment = scheduler, job_id, policy, comment
            row.opt_in_errors, row.state, row.last_seen = list(opt_in_errors), state, when
            if incarnation:
                row.incarnation = incarnation

        await self._transaction(work)

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
                    self._add_outcome(session, item, actions.OutcomeRecord(
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
                row.state, row.last_seen = state, to_datetime(at)

        await self._transaction(work)

    async def get_workload(self, workload: str) -> WorkloadRecord | None:
        async with self._sessions() as session:
            row = await session.get(tables.Workload, workload)
            if row is None:
                return None
            return WorkloadRecord(
                id=row.id, scheduler=row.scheduler, job_id=row.job_id, policy=row.policy, comment=row.comment,
                opt_in_errors=list(row.opt_in_errors), state=row.state,
                first_seen=to_epoch(row.first_seen), last_seen=to_epoch(row.last_seen), incarnation=row.incarnation,
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

        async def work(session: AsyncSession) -> None:
            await self._ensure_workload(session, workload, at)
            query = sa.select(tables.Attempt).where(tables.Attempt.workload == workload,
                                                    tables.Attempt.attempt == attempt)
            row = (await session.execute(query)).scalar_one_or_none()
            if row is None:
                row = tables.Attempt(workload=workload, attempt=attempt, checkpoint_saved=False, state="")
                session.add(row)
            if started_at is not None:
                row.started_at = to_datetime(started_at)
            if ended_at is not None:
                row.ended_at = to_datetime(ended_at)
            if checkpoint_saved is not None:
                row.checkpoint_saved = checkpoint_saved
            if state is not None:
                row.state = state
            if checkpoint_at is not None and (row.last_checkpoint_at is None
                                              or to_datetime(checkpoint_at) > row.last_checkpoint_at):
                row.last_checkpoint_at = to_datetime(checkpoint_at)
            if nodes:
                row.nodes = list(dict.fromkeys([*(row.nodes or []), *nodes]))

        await self._transaction(work)

    async def allocation(self, workload: str) -> list[str]:
        """Every node the scheduler placed an attempt of ``workload`` on, as recorded, in first-seen order."""
        async with self._sessions() as session:
            return await self._allocation(session, workload)

    @staticmethod
    async def _allocation(session: AsyncSession, workload: str) -> list[str]:
        query = (sa.select(tables.Attempt.nodes).where(tables.Attempt.workload == workload)
                 .order_by(tables.Attempt.attempt))
        nodes: dict[str, None] = {}
        for value in (await session.execute(query)).scalars().all():
            nodes.update(dict.fromkeys(str(node) for node in value or []))
        return list(nodes)

    # -- tail positions -----------------------------------------------------------------------

    async def _save_tail(self, session: AsyncSession, records: Sequence[TailRecord], at: float) -> None:
        when = to_datetime(at)
        # The ids of these workloads' rows in one query per 500 (not one per record), then one
        # executemany UPDATE by id: the tailing round saves the moved positions of every tracked
        # workload several times a second, and loading and flushing thousands of ORM rows per round
        # cost ~30 us each (at 10,000 workloads a third of a core, with SQLite's write lock held).
        names = list(dict.fromkeys(rec.workload for rec in records))
        table = tables.TailPositionRow.__table__
        assert isinstance(table, sa.Table)
        ids: dict[tuple[str, int, str], int] = {}
        for start in range(0, len(names), 500):
            chunk = names[start:start + 500]
            query = sa.select(table.c.id, table.c.workload, table.c.attempt, table.c.path_key).where(
                table.c.workload.in_(chunk))
            for row_id, workload, attempt, key in (await session.execute(query)).all():
                ids[(workload, attempt, key)] = row_id
        moved: dict[int, dict[str, object]] = {}
        added: dict[tuple[str, int, str], tables.TailPositionRow] = {}
        for rec in records:
            key = (rec.workload, rec.attempt, path_key(rec.path))
            values: dict[str, object] = {"source": rec.source, "inode": rec.inode, "byte_offset": rec.offset,
                                         "lineno": rec.lineno, "fingerprint": rec.fingerprint, "updated_at": when}
            row_id = ids.get(key)
            if row_id is not None:
                if rec.basis:
                    values["basis"] = rec.basis
                moved.setdefault(row_id, {}).update(values)  # a later record of the same key wins
                continue
            row = added.get(key)
            if row is None:
                await self._ensure_workload(session, rec.workload, at)
                row = added[key] = tables.TailPositionRow(workload=rec.workload, attempt=rec.attempt,
                                                          path_key=key[2], path=rec.path)
                session.add(row)
            for name, value in values.items():
                setattr(row, name, value)
            if rec.basis:
                row.basis = rec.basis
        # Rows keep their stored basis unless a record brings one: one statement per set of columns.
        by_columns: dict[tuple[str, ...], list[dict[str, object]]] = {}
        for row_id, values in moved.items():
            by_columns.setdefault(tuple(sorted(values)), []).append(
                {"row_id": row_id, **{f"new_{name}": value for name, value in values.items()}})
        for columns, params in by_columns.items():
            stmt = (sa.update(table).where(table.c.id == sa.bindparam("row_id"))
                    .values({name: sa.bindparam(f"new_{name}") for name in columns}))
            await session.execute(stmt, params)
        await session.flush()

    async def save_tail_positions(self, records: Sequence[TailRecord], *, at: float) -> None:
        """Create or move read positions (one transaction for all); an empty ``basis`` keeps the stored one."""
        if not records:
            return
        try:
            await self._transaction(lambda session: self._save_tail(session, records, at))
        except sa_exc.IntegrityError:
            # Another writer inserted the same key first: the rows exist now, so this is an update.
            await self._transaction(lambda session: self._save_tail(session, records, at))

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

    async def tail_positions(self, workload: str) -> list[TailRecord]:
        """Every saved read position of a workload, oldest attempt first."""
        query = (sa.select(tables.TailPositionRow).where(tables.TailPositionRow.workload == workload)
                 .order_by(tables.TailPositionRow.attempt, tables.TailPositionRow.id))
        async with self._sessions() as session:
            return [TailRecord(workload=r.workload, attempt=r.attempt, path=r.path, source=r.source, inode=r.inode,
                               offset=r.byte_offset, lineno=r.lineno, fingerprint=r.fingerprint, basis=r.basis)
                    for r in (await session.execute(query)).scalars().all()]

    async def attempt_facts(self, workload: str) -> list[AttemptFacts]:
        """Every recorded attempt of ``workload`` with its latest verdict and its advice, oldest first."""
        async with self._sessions() as session:
            rows = (await session.execute(sa.select(tables.Attempt).where(tables.Attempt.workload == workload)
                                          .order_by(tables.Attempt.attempt))).scalars().all()
            verdicts_q = (sa.select(tables.VerdictRow).where(tables.VerdictRow.workload == workload)
                          .order_by(tables.VerdictRow.id))
            latest = {v.attempt: v for v in (await session.execute(verdicts_q)).scalars().all()}
            advice_q = (sa.select(tables.AdviceRow).where(tables.AdviceRow.workload == workload)
                        .order_by(tables.AdviceRow.attempt, tables.AdviceRow.generation))
            given: dict[int, list[tuple[int, str, list[str]]]] = {}
            for a in (await session.execute(advice_q)).scalars().all():
                exclusions = [str(n) for n in (a.payload or {}).get("exclude_nodes") or []]
                given.setdefault(a.attempt, []).append((a.generation, a.action, exclusions))
        numbers = sorted({r.attempt for r in rows} | set(latest) | set(given))
        by_number = {r.attempt: r for r in rows}
        facts = []
        for number in numbers:
            row, verdict = by_number.get(number), latest.get(number)
            facts.append(AttemptFacts(
                attempt=number,
                started_at=to_epoch(row.started_at) if row is not None and row.started_at is not None else None,
                ended_at=to_epoch(row.ended_at) if row is not None and row.ended_at is not None else None,
                checkpoint_saved=bool(row.checkpoint_saved) if row is not None else False,
                category=verdict.category if verdict is not None else None,
                attribution=verdict.attribution if verdict is not None else None,
                advice=given.get(number, []),
            ))
        return facts

    # -- detection and attribution ------------------------------------------------------------

    async def record_anomaly(self, *, workload: str, attempt: int, anomaly: anomalies.Anomaly, at: float) -> None:
        payload = anomaly.model_dump(mode="json")

        async def work(session: AsyncSession) -> None:
            await self._ensure_workload(session, workload, at)
            session.add(tables.AnomalyRow(workload=workload, attempt=attempt, symptom=anomaly.symptom.value,
                                          category=anomaly.category.value, payload=payload, at=to_datetime(at)))
            self._log(session, at=at, workload=workload, attempt=attempt, kind=vocab.AuditKind.ANOMALY,
                      payload=payload, decided_by="detector")

        await self._transaction(work)

    async def record_verdict(
        self, *, workload: str, attempt: int, verdict: verdicts.Verdict, at: float,
    ) -> None:
        payload = verdict.model_dump(mode="json")
        payload["nodes"] = list(verdict.suspect_nodes)

        async def work(session: AsyncSession) -> None:
            await self._ensure_workload(session, workload, at)
            session.add(tables.VerdictRow(workload=workload, attempt=attempt, attribution=verdict.attribution.value,
                                          category=verdict.category.value, payload=payload, at=to_datetime(at)))
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
        placed = set(await self._allocation(session, workload))
        query = sa.select(tables.NodeHistoryRow.node).where(
            tables.NodeHistoryRow.workload == workload, tables.NodeHistoryRow.attempt == attempt)
        known = set((await session.execute(query)).scalars().all())
        for node in dict.fromkeys(verdict.suspect_nodes):
            if node in placed and node not in known:
                session.add(tables.NodeHistoryRow(node=node, workload=workload, attempt=attempt,
                                                  category=verdict.category.value, at=to_datetime(at)))

    async def node_history(self, *, since: float) -> list[NodeImplication]:
        """Suspect-node implications recorded with verdicts since ``since`` (oldest first)."""
        query = (sa.select(tables.NodeHistoryRow).where(tables.NodeHistoryRow.at >= to_datetime(since))
                 .order_by(tables.NodeHistoryRow.id))
        async with self._sessions() as session:
            rows = (await session.execute(query)).scalars().all()
            return [NodeImplication(node=r.node, workload=r.workload, category=r.category, at=to_epoch(r.at),
                                    attempt=r.attempt or 0) for r in rows]

    # -- advice -----------------------------------------------------------------------------

    @staticmethod
    def _advice_query(workload: str, attempt: int, generation: int) -> sa.Select[Any]:
        return sa.select(tables.AdviceRow).where(
            tables.AdviceRow.workload == workload, tables.AdviceRow.attempt == attempt,
            tables.AdviceRow.generation == generation,
        )

    async def record_advice(self, item: advice.Advice, *, at: float, tail: Sequence[TailRecord] = ()) -> bool:
        """Write the advice and its audit record; False (and nothing written) if the key exists.

        ``tail``: read positions saved in the same transaction, so that after a crash either
        the advice exists and the lines behind it are never read again, or neither is stored
        and those lines are read and decided on again.
        """
        payload = advice_payload(item)

        async def work(session: AsyncSession) -> bool:
            query = self._advice_query(item.workload, item.attempt, item.generation)
            if (await session.execute(query)).scalar_one_or_none() is not None:
                return False
            await self._ensure_workload(session, item.workload, at)
            await self._save_tail(session, tail, at)
            when = to_datetime(at)
            session.add(tables.AdviceRow(
                workload=item.workload, attempt=item.attempt, generation=item.generation, action=item.action.value,
                mode=item.mode.value, payload=payload,
                deadline=None if item.deadline is None else to_datetime(item.deadline),
                disposition=vocab.Disposition.PENDING.value, decided_by=item.decided_by.value,
                created_at=when, updated_at=when,
            ))
            self._log(session, at=at, workload=item.workload, attempt=item.attempt, kind=vocab.AuditKind.ADVICE,
                      payload=payload, decided_by=item.decided_by.value)
            await session.flush()
            return True

        try:
            return await self._transaction(work)
        except sa_exc.IntegrityError:
            if await self.get_advice(item.workload, item.attempt, item.generation) is not None:
                return False  # another writer won the race for the same key
        # Not the advice's key: another writer inserted one of these read positions first (the
        # tailing round saves the same workload's positions). They exist now, so this saves them as
        # an update. Raising instead lost the decision (seen in a parallel CI run: an anomaly and a
        # verdict, never an advice).
        try:
            return await self._transaction(work)
        except sa_exc.IntegrityError:
            if await self.get_advice(item.workload, item.attempt, item.generation) is not None:
                return False
            raise

    async def get_advice(self, workload: str, attempt: int, generation: int) -> advice.Advice | None:
        async with self._sessions() as session:
            row = (await session.execute(self._advice_query(workload, attempt, generation))).scalar_one_or_none()
            return None if row is None else advice.Advice.model_validate(row.payload)

    async def pending_advice(self) -> list[advice.Advice]:
        """Advice generations without an outcome yet (to resume or to time out), oldest first."""
        query = (sa.select(tables.AdviceRow).where(tables.AdviceRow.disposition == vocab.Disposition.PENDING.value)
                 .order_by(tables.AdviceRow.id))
        async with self._sessions() as session:
            rows = (await session.execute(query)).scalars().all()
            return [advice.Advice.model_validate(row.payload) for row in rows]

    # -- actions ----------------------------------------------------------------------------

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

    async def claim_leadership(self, lease: str, holder: str, *, at: float) -> actions.FenceToken:
        """Start a term as the acting replica of ``lease``: the next term, recorded for ``holder``.

        Called by a replica right after it took the Lease and before it acts. From this commit on,
        intents fenced with an older term of this lease are refused. Concurrent claims are ordered
        by the database (a conditional update of the row, or the primary key on the first claim).
        """
        when = to_datetime(at)

        async def work(session: AsyncSession) -> actions.FenceToken:
            row = await session.get(tables.LeadershipRow, lease)
            if row is None:
                session.add(tables.LeadershipRow(lease=lease, holder=holder, term=1, claimed_at=when,
                                                 last_fenced_at=when))
                await session.flush()
                return actions.FenceToken(lease=lease, holder=holder, term=1)
            update = (sa.update(tables.LeadershipRow)
                      .where(tables.LeadershipRow.lease == lease, tables.LeadershipRow.term == row.term)
                      .values(holder=holder, term=row.term + 1, claimed_at=when)
                      .execution_options(synchronize_session=False))
            if (await session.execute(update)).rowcount != 1:  # type: ignore[attr-defined]
                raise _ClaimRaced
            return actions.FenceToken(lease=lease, holder=holder, term=row.term + 1)

        for _ in range(5):
            try:
                return await self._transaction(work)
            except (_ClaimRaced, sa_exc.IntegrityError):
                continue  # another replica claimed in between: claim on top of it
        raise RuntimeError(f"could not claim leadership of {lease!r}: five concurrent claims in a row")

    async def leadership(self, lease: str) -> actions.FenceToken | None:
        """The latest claim of ``lease``, or None if nobody claimed it yet."""
        async with self._sessions() as session:
            row = await session.get(tables.LeadershipRow, lease)
            return None if row is None else actions.FenceToken(lease=row.lease, holder=row.holder, term=row.term)

    async def lease_records(self, prefix: str) -> dict[str, LeaseRecord]:
        """Every claim whose lease name starts with ``prefix`` (the shard leases of one sharding, and
        its members), in one read: what a shard candidate observes each round (``shards.StoreLeases``)."""
        async with self._sessions() as session:
            rows = (await session.scalars(sa.select(tables.LeadershipRow)
                                          .where(tables.LeadershipRow.lease.startswith(prefix, autoescape=True))))
            return {row.lease: LeaseRecord(holder=row.holder, term=row.term, renewed_at=to_epoch(row.last_fenced_at))
                    for row in rows}

    async def take_lease(self, lease: str, holder: str, *, observed_term: int | None,
                         at: float) -> actions.FenceToken | None:
        """Take ``lease`` for ``holder`` as the next term, only if its claim is still the one observed
        (``observed_term``; None: no claim yet). None when another replica wrote in between: of two
        candidates racing for a free or expired lease exactly one wins. Unlike ``claim_leadership``,
        which claims on top of whatever is there (the Kubernetes Lease already decided who leads),
        this conditional update is itself the election of a database lease."""
        when = to_datetime(at)

        async def work(session: AsyncSession) -> actions.FenceToken | None:
            if observed_term is None:
                session.add(tables.LeadershipRow(lease=lease, holder=holder, term=1, claimed_at=when,
                                                 last_fenced_at=when))
                await session.flush()
                return actions.FenceToken(lease=lease, holder=holder, term=1)
            update = (sa.update(tables.LeadershipRow)
                      .where(tables.LeadershipRow.lease == lease, tables.LeadershipRow.term == observed_term)
                      .values(holder=holder, term=observed_term + 1, claimed_at=when, last_fenced_at=when)
                      .execution_options(synchronize_session=False))
            if (await session.execute(update)).rowcount != 1:  # type: ignore[attr-defined]
                return None
            return actions.FenceToken(lease=lease, holder=holder, term=observed_term + 1)

        try:
            return await self._commit(work)
        except sa_exc.IntegrityError:
            return None  # another replica created the first claim at the same time

    async def renew_lease(self, token: actions.FenceToken, *, at: float) -> bool:
        """Renew a database lease: the same conditional write a fenced intent makes (``_check_fence``),
        so the new ``renewed_at`` tells the other candidates the holder is alive. False when the
        token is no longer the latest claim (another replica took the lease): stop acting on it."""

        async def work(session: AsyncSession) -> bool:
            try:
                await self._check_fence(session, token, at)
            except actions.FencedError:
                return False
            return True

        return await self._commit(work)

    async def release_lease(self, token: actions.FenceToken, *, at: float) -> bool:
        """Give a database lease up (a clean stop or a rebalance): the holder becomes empty, the term
        stays, so the next taker's term is higher and this token is refused from then on."""

        async def work(session: AsyncSession) -> bool:
            update = (sa.update(tables.LeadershipRow)
                      .where(tables.LeadershipRow.lease == token.lease, tables.LeadershipRow.holder == token.holder,
                             tables.LeadershipRow.term == token.term)
                      .values(holder="", last_fenced_at=to_datetime(at))
                      .execution_options(synchronize_session=False))
            return bool((await session.execute(update)).rowcount == 1)  # type: ignore[attr-defined]

        return await self._commit(work)

    @staticmethod
    async def _check_fence(session: AsyncSession, fence: actions.FenceToken, at: float) -> None:
        """Refuse unless ``fence`` is the latest claim of its lease; locks the claim row until commit.

        An UPDATE, not a SELECT: it takes the row's write lock on every backend (PostgreSQL and
        MariaDB re-check the WHERE clause against a concurrent claim's committed row; SQLite has one
        writer), so a claim either commits before this check and is seen, or waits for this intent.
        """
        update = (sa.update(tables.LeadershipRow)
                  .where(tables.LeadershipRow.lease == fence.lease, tables.LeadershipRow.holder == fence.holder,
                         tables.LeadershipRow.term == fence.term)
                  .values(last_fenced_at=to_datetime(at))
                  .execution_options(synchronize_session=False))
        if (await session.execute(update)).rowcount == 1:  # type: ignore[attr-defined]
            return
        current = await session.get(tables.LeadershipRow, fence.lease)
        now_held = "nobody" if current is None else f"{current.holder} (term {current.term})"
        raise actions.FencedError(f"leadership token {fence.describe()} is not current: {fence.lease} is held by "
                                  f"{now_held}")

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
                await self._check_fence(session, fence, at)
            query = self._action_query(record.workload, record.attempt, record.generation)
            existing = (await session.execute(query.where(tables.ActionRow.step == record.step))).scalar_one_or_none()
            if existing is not None:
                token = fence.describe() if fence is not None else None
                if token and existing.status == actions.ActionStatus.INTENT.value and existing.fence != token:
                    # A new leader resumes an intent begun under another token: the row now carries
                    # the token it is carried out under, and the stream says whose intent it took over.
                    previous = existing.fence or "standalone"
                    existing.fence, existing.updated_at = token, to_datetime(at)
                    advice_of = await session.get(tables.AdviceRow, existing.advice_id)
                    self._log_action(session, existing, at, advice_of.action if advice_of is not None else "",
                                     resumed_from=previous)
                    await session.flush()
                return _action_record(existing)
            advice_row = (await session.execute(
                self._advice_query(record.workload, record.attempt, record.generation))).scalar_one_or_none()
            if advice_row is None:
                raise LookupError(f"no advice {record.workload} attempt {record.attempt} "
                                  f"generation {record.generation}: the advice is written before any action")
            when = to_datetime(at)
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
            return _action_record(row)

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
                return _action_record(row)
            row.status, row.error, row.updated_at = status.value, error, to_datetime(at)
            if result:
                row.args = {**row.args, **result}
            advice_row = await session.get(tables.AdviceRow, row.advice_id)
            self._log_action(session, row, at, advice_row.action if advice_row is not None else "")
            await session.flush()
            return _action_record(row)

        return await self._transaction(work)

    async def actions_for(self, workload: str, attempt: int, generation: int) -> list[actions.ActionRecord]:
        """Every step row of one advice generation, in the order they were begun."""
        async with self._sessions() as session:
            query = self._action_query(workload, attempt, generation).order_by(tables.ActionRow.id)
            return [_action_record(row) for row in (await session.execute(query)).scalars().all()]

    async def actions_of(self, workload: str) -> list[actions.ActionRecord]:
        """Every action row of ``workload`` (all attempts and generations), in the order they were
        begun: what we did to it, which tells a person's change from ours (``act.whose``)."""
        query = sa.select(tables.ActionRow).where(tables.ActionRow.workload == workload).order_by(tables.ActionRow.id)
        async with self._sessions() as session:
            return [_action_record(row) for row in (await session.execute(query)).scalars().all()]

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
            query = query.where(tables.ActionRow.created_at >= to_datetime(since))
        async with self._sessions() as session:
            return [_action_record(row) for row in (await session.execute(query.order_by(tables.ActionRow.id)))
                    .scalars().all()]

    # -- outcomes and the watchdog ----------------------------------------------------------------

    async def record_outcome(self, outcome: actions.OutcomeRecord) -> actions.OutcomeRecord:
        """Close an advice generation; returns the stored outcome (the first one wins)."""

        async def work(session: AsyncSession) -> actions.OutcomeRecord:
            advice_row = (await session.execute(
                self._advice_query(outcome.workload, outcome.attempt, outcome.generation))).scalar_one_or_none()
            if advice_row is None:
                raise LookupError(f"no advice {outcome.workload} attempt {outcome.attempt} "
                                  f"generation {outcome.generation}")
            existing = (await session.execute(
                sa.select(tables.OutcomeRow).where(tables.OutcomeRow.advice_id == advice_row.id))).scalar_one_or_none()
            if existing is not None:
                return _outcome_record(existing)
            row = self._add_outcome(session, advice_row, outcome)
            await session.flush()
            return _outcome_record(row)

        return await self._transaction(work)

    def _add_outcome(self, session: AsyncSession, advice_row: tables.AdviceRow,
                     outcome: actions.OutcomeRecord) -> tables.OutcomeRow:
        """The outcome row of ``advice_row``, its disposition on the advice, and its audit record."""
        row = tables.OutcomeRow(
            advice_id=advice_row.id, workload=outcome.workload, attempt=outcome.attempt,
            generation=outcome.generation, disposition=outcome.disposition.value, detail=outcome.detail,
            decided_by=outcome.decided_by.value, at=to_datetime(outcome.at),
        )
        session.add(row)
        advice_row.disposition, advice_row.updated_at = outcome.disposition.value, to_datetime(outcome.at)
        payload: dict[str, Any] = {"disposition": outcome.disposition.value, "detail": outcome.detail,
                                   "generation": outcome.generation, "action": advice_row.action}
        if outcome.limits is not None:
            payload["blast_radius"] = outcome.limits
        self._log(session, at=outcome.at, workload=outcome.workload, attempt=outcome.attempt,
                  kind=vocab.AuditKind.OUTCOME, payload=payload, decided_by=outcome.decided_by.value)
        return row

    async def get_outcome(self, workload: str, attempt: int, generation: int) -> actions.OutcomeRecord | None:
        query = sa.select(tables.OutcomeRow).where(
            tables.OutcomeRow.workload == workload, tables.OutcomeRow.attempt == attempt,
            tables.OutcomeRow.generation == generation,
        )
        async with self._sessions() as session:
            row = (await session.execute(query)).scalar_one_or_none()
            return None if row is None else _outcome_record(row)

    async def record_watchdog(
        self, *, workload: str, attempt: int, generation: int, payload: dict[str, object], at: float,
    ) -> None:
        """A watchdog intervention (deadline passed, step failed, hold released on start)."""

        async def work(session: AsyncSession) -> None:
            self._log(session, at=at, workload=workload, attempt=attempt, kind=vocab.AuditKind.WATCHDOG,
                      payload={"generation": generation, **payload}, decided_by=vocab.Decider.WATCHDOG.value)

        await self._transaction(work)

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
            await self._ensure_workload(session, workload, at)
            self._log(session, at=at, workload=workload, attempt=attempt, kind=vocab.AuditKind.ACTION,
                      payload=payload, decided_by="scheduler")

        await self._transaction(work)

    async def control(self, name: str) -> ControlRecord | None:
        """The current value of a cluster-wide control (``set_control``), or None if never set."""
        async with self._sessions() as session:
            row = await session.get(tables.ControlRow, name)
            if row is None:
                return None
            return ControlRecord(name=row.name, value=dict(row.value), updated_by=row.updated_by,
                                 updated_at=to_epoch(row.updated_at))

    async def set_control(self, name: str, value: dict[str, Any], *, by: str, channel: str, at: float,
                          payload: dict[str, object]) -> ControlRecord:
        """Set a cluster-wide control and write its audit record (kind ``action``, no workload, decided
        by ``channel``: ``cli``, ``api``, ``kubernetes``) in one transaction."""

        async def work(session: AsyncSession) -> ControlRecord:
            row = await session.get(tables.ControlRow, name, with_for_update=True)
            if row is None:
                row = tables.ControlRow(name=name, value=dict(value), updated_by=by[:255], updated_at=to_datetime(at))
                session.add(row)
            else:
                row.value, row.updated_by, row.updated_at = dict(value), by[:255], to_datetime(at)
            self._log(session, at=at, workload="", attempt=None, kind=vocab.AuditKind.ACTION,
                      payload={**payload, "control": name, "by": by}, decided_by=channel)
            return ControlRecord(name=name, value=dict(value), updated_by=by, updated_at=at)

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
                await self._check_fence(session, fence, at)
            when = to_datetime(at)
            row = await ledger.lock(session, when)
            earlier = next((e for e in row.value.get("reserved", []) if ledger.key_of(
                e["workload"], e["attempt"], e["generation"]) == key), None)
            if earlier is not None:
                return limits.LimitReport.model_validate(earlier["report"])
            live = await ledger.in_flight(session, row, since)
            counted = (actions.ActionStatus.DONE.value, actions.ActionStatus.INTENT.value)
            rows = (await session.execute(sa.select(tables.ActionRow).where(
                tables.ActionRow.created_at >= to_datetime(since), tables.ActionRow.status.in_(counted))
                .order_by(tables.ActionRow.id))).scalars().all()
            decision = await decide([_action_record(r) for r in ledger.window_rows(rows, live)], live)
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
            session.add(tables.ControlRow(name=name, value=value, updated_by="trainguard", updated_at=to_datetime(at)))
        else:
            row.value, row.updated_by, row.updated_at = value, "trainguard", to_datetime(at)
        self._log(session, at=at, workload=workload, attempt=attempt, kind=vocab.AuditKind.ACTION,
                  payload={"operation": "breaker-open", "status": "done", "control": name, "reason": reason},
                  decided_by=vocab.Decider.POLICY_ENGINE.value)

    async def record_api_action(
        self, *, workload: str, attempt: int | None, payload: dict[str, object], by: str, at: float,
    ) -> AuditRecord:
        """A change a person made through the HTTP API (mode switch, acknowledgement, undo): an
        ``action`` record whose ``decided_by`` is ``api`` and whose payload names who (``by``)."""

        async def work(session: AsyncSession) -> AuditRecord:
            row = self._log(session, at=at, workload=workload, attempt=attempt, kind=vocab.AuditKind.ACTION,
                            payload={**payload, "by": by}, decided_by="api")
            await session.flush()
            return AuditRecord(id=row.id, time=to_datetime(at), workload=workload, attempt=attempt,
                               kind=vocab.AuditKind.ACTION, payload=dict(row.payload), decided_by="api",
                               policy_version=row.policy_version, catalog_version=row.catalog_version,
                               settings_fingerprint=row.settings_fingerprint)

        return await self._transaction(work)

    async def fired_patterns(
        self, *, since: datetime.datetime | None = None, workload: str | None = None
    ) -> list[PatternFiring]:
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
        found = [PatternFiring(pattern=pattern, **entry) for pattern, entry in counts.items()]
        return sorted(found, key=lambda f: (-f.anomalies, f.pattern))

    # -- the unified stream ---------------------------------------------------------------------

    async def audit_records(
        self, *, workload: str | None = None, kind: vocab.AuditKind | None = None,
        since: datetime.datetime | None = None, limit: int | None = None,
    ) -> list[AuditRecord]:
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
            AuditRecord(
                id=r.id, time=r.time, workload=r.workload, attempt=r.attempt, kind=vocab.AuditKind(r.kind),
                payload=dict(r.payload), decided_by=r.decided_by, policy_version=r.policy_version,
                catalog_version=r.catalog_version, settings_fingerprint=r.settings_fingerprint,
            )
            for r in rows
        ]


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
