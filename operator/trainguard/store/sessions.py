"""Transactions of the audit store: one session per write, group commit, and the audit-log append.

Place: the base of every part of ``store.audit.AuditStore``. Each write is one transaction
(``_transaction``) that may also append records to ``audit_log`` (``_log``), the unified stream
``trainguard audit`` prints, so the stream and the tables cannot disagree; the observers
(``AuditObserver``: the engine's metrics) are told of those records only once the transaction
committed. ``grouped()`` lets concurrent idempotent writes share one commit.

Errors are raised, never swallowed: a record that cannot be written must stop the action it precedes.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from trainguard.model import times, vocab
from trainguard.store import records, tables

T = TypeVar("T")

logger = logging.getLogger(__name__)

_WRITTEN = "trainguard_audit_written"
"""Key in a session's ``info``: the audit records added in its transaction, told to observers on commit."""

_GROUPED: contextvars.ContextVar[bool] = contextvars.ContextVar("trainguard_store_grouped", default=False)
"""Set by ``StoreBase.grouped()``: this task's writes may share a commit with concurrent ones."""

GROUP_MAX = 512
"""Writes committed together at most (one transaction stays short enough for other writers)."""


async def ensure_workload(session: AsyncSession, workload: str, at: float) -> None:
    """A bare workload row for ``workload`` if there is none: every row keyed by a workload needs one."""
    if await session.get(tables.Workload, workload) is None:
        session.add(_bare_workload(workload, at))
        await session.flush()


async def ensure_workloads(session: AsyncSession, workloads: Sequence[tuple[str, float]]) -> None:
    """``ensure_workload`` of many ``(workload, at)``: one query per 500 names and one flush, not a
    round trip each (a bare row takes the first ``at`` given for its workload)."""
    first_at: dict[str, float] = {}
    for name, at in workloads:
        first_at.setdefault(name, at)
    names = list(first_at)
    found: set[str] = set()
    for start in range(0, len(names), IN_CHUNK):
        query = sa.select(tables.Workload.id).where(tables.Workload.id.in_(names[start:start + IN_CHUNK]))
        found.update((await session.execute(query)).scalars())
    missing = [name for name in names if name not in found]
    if missing:
        session.add_all([_bare_workload(name, first_at[name]) for name in missing])
        await session.flush()


def _bare_workload(workload: str, at: float) -> tables.Workload:
    when = times.to_datetime(at)
    return tables.Workload(id=workload, scheduler="", job_id="", policy="", comment="", opt_in_errors=[], state="",
                           first_seen=when, last_seen=when)


async def insert_new(session: AsyncSession, rows: Sequence[tables.Base]) -> None:
    """Insert new rows (transient ORM objects of one table, never added to ``session``) with one
    executemany: the ORM would send one INSERT a row whose id the database assigns (it reads each
    id back). A column left unset takes its default; the rows are not loaded into ``session``."""
    if not rows:
        return
    table = type(rows[0]).__table__
    assert isinstance(table, sa.Table)
    columns = [c for c in table.columns if not (c.primary_key and c.autoincrement in (True, "auto"))]
    params = []
    for row in rows:
        values: dict[str, Any] = {}
        for column in columns:
            value = getattr(row, column.key)
            if value is None and column.default is not None and column.default.is_scalar:
                value = column.default.arg
            elif value is None and column.default is not None and column.default.is_callable:
                value = column.default.arg(None)
            values[column.key] = value
        params.append(values)
    await session.execute(sa.insert(table), params)


IN_CHUNK = 500
"""Keys per ``IN (...)`` of a batched read (within every backend's bound-parameter limit)."""


Bulk = tuple[Callable[[AsyncSession, list[Any]], Awaitable[None]], Any]
"""A grouped write that can be written together with others of its kind: ``(write_many, item)``.
The group writer calls ``write_many(session, items)`` once for all the queued items of one
``write_many`` (a few statements for hundreds of writes), instead of each write's own statements."""


async def _all_of(
    live: Sequence[tuple[Callable[[AsyncSession], Awaitable[Any]], asyncio.Future[Any], Bulk | None]],
    session: AsyncSession,
) -> list[Any]:
    """Every write of one group in ``session``: each bulk kind once for all its items (a bulk write
    returns None to each caller), the others one after the other, in the order they came."""
    results: list[Any] = [None] * len(live)
    kinds: dict[Any, list[Any]] = {}
    for _, _, bulk in live:
        if bulk is not None:
            kinds.setdefault(bulk[0], []).append(bulk[1])
    for write_many, items in kinds.items():
        await write_many(session, items)
    for i, (work, _, bulk) in enumerate(live):
        if bulk is None:
            results[i] = await work(session)
    return results


class StoreBase:
    """The database, its sessions and the audit-log append shared by every part of ``AuditStore``."""

    def __init__(self, engine: AsyncEngine, *, context: records.AuditContext) -> None:
        self._engine = engine
        self._sessions = async_sessionmaker(engine, expire_on_commit=False)
        self.context = context
        self.observers: list[records.AuditObserver] = []
        """Told about every committed audit record (``records.AuditObserver``)."""
        self._group: list[tuple[Callable[[AsyncSession], Awaitable[Any]], asyncio.Future[Any], Bulk | None]] = []
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

    async def _transaction(self, work: Callable[[AsyncSession], Awaitable[T]], *, bulk: Bulk | None = None) -> T:
        """Run ``work`` in a transaction of its own, or, within ``grouped()``, in a shared one; there
        ``bulk`` (when given) writes it together with the other queued writes of its kind."""
        if _GROUPED.get():
            return await self._grouped(work, bulk)
        return await self._commit(work)

    async def _grouped(self, work: Callable[[AsyncSession], Awaitable[T]], bulk: Bulk | None = None) -> T:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._group.append((work, future, bulk))
        if self._group_writer is None or self._group_writer.done():
            self._group_writer = asyncio.ensure_future(self._write_groups())
        result: T = await future
        return result

    async def _write_groups(self) -> None:
        """Commit the queued grouped writes, up to ``GROUP_MAX`` per transaction. When a group's
        transaction fails, each of its writes is retried alone, so that an error reaches its own
        caller only (and the others still commit)."""
        live: list[tuple[Callable[[AsyncSession], Awaitable[Any]], asyncio.Future[Any], Bulk | None]] = []
        try:
            while self._group:
                await asyncio.sleep(0)  # let the writers of this round join
                batch, self._group = self._group[:GROUP_MAX], self._group[GROUP_MAX:]
                live = [(w, f, b) for w, f, b in batch if not f.done()]
                if len(live) > 1:
                    try:
                        results = await self._commit(functools.partial(_all_of, live))
                    except Exception:
                        logger.debug("a grouped commit of %d writes failed; writing them one by one", len(live))
                    else:
                        for (_, f, _b), value in zip(live, results, strict=True):
                            if not f.done():
                                f.set_result(value)
                        continue
                for w, f, _b in live:
                    try:
                        value = await self._commit(w)
                    except Exception as exc:
                        if not f.done():
                            f.set_exception(exc)
                    else:
                        if not f.done():
                            f.set_result(value)
        except BaseException as exc:
            for _, f, _b in [*live, *self._group]:
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
            record = records.Written(kind=row.kind, workload=row.workload, attempt=row.attempt,
                                     payload=row.payload, decided_by=row.decided_by, at=at, write_s=seconds)
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
            time=times.to_datetime(at), workload=workload, attempt=attempt, kind=kind.value, payload=payload,
            decided_by=decided_by, policy_version=self.context.policy_version,
            catalog_version=self.context.catalog_version, settings_fingerprint=self.context.settings_fingerprint,
        )
        session.add(row)
        if self.observers:
            session.info.setdefault(_WRITTEN, []).append((row, at))
        return row
