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
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar

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
        when = times.to_datetime(at)
        session.add(tables.Workload(
            id=workload, scheduler="", job_id="", policy="", comment="", opt_in_errors=[], state="",
            first_seen=when, last_seen=when,
        ))
        await session.flush()


class StoreBase:
    """The database, its sessions and the audit-log append shared by every part of ``AuditStore``."""

    def __init__(self, engine: AsyncEngine, *, context: records.AuditContext) -> None:
        self._engine = engine
        self._sessions = async_sessionmaker(engine, expire_on_commit=False)
        self.context = context
        self.observers: list[records.AuditObserver] = []
        """Told about every committed audit record (``records.AuditObserver``)."""
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
