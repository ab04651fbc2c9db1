"""Leadership and database leases: terms that fence every mutation.

Place: the part of ``store.audit.AuditStore`` behind ``shards.StoreLeases`` (``take_lease``,
``renew_lease``, ``release_lease``, ``lease_records``) and the operator's leader election
(``claim_leadership``). ``check_fence`` is the check every fenced write (an action intent, a limit
reservation) makes in its own transaction: a token that is not the lease's latest claim is refused.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncSession

from trainguard.model import actions, times
from trainguard.store import records, sessions, tables


class _ClaimRaced(Exception):
    """Another replica claimed between our read and our conditional update (retried)."""


class LeaseStore(sessions.StoreBase):
    """Leadership rows (see the module docstring)."""

    async def claim_leadership(self, lease: str, holder: str, *, at: float) -> actions.FenceToken:
        """Start a term as the acting replica of ``lease``: the next term, recorded for ``holder``.

        Called by a replica right after it took the Lease and before it acts. From this commit on,
        intents fenced with an older term of this lease are refused. Concurrent claims are ordered
        by the database (a conditional update of the row, or the primary key on the first claim).
        """
        when = times.to_datetime(at)

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

    async def lease_records(self, prefix: str) -> dict[str, records.LeaseRecord]:
        """Every claim whose lease name starts with ``prefix`` (the shard leases of one sharding, and
        its members), in one read: what a shard candidate observes each round (``shards.StoreLeases``)."""
        async with self._sessions() as session:
            rows = (await session.scalars(sa.select(tables.LeadershipRow)
                                          .where(tables.LeadershipRow.lease.startswith(prefix, autoescape=True))))
            return {row.lease: records.LeaseRecord(holder=row.holder, term=row.term,
                                                   renewed_at=times.to_epoch(row.last_fenced_at))
                    for row in rows}

    async def take_lease(self, lease: str, holder: str, *, observed_term: int | None,
                         at: float) -> actions.FenceToken | None:
        """Take ``lease`` for ``holder`` as the next term, only if its claim is still the one observed
        (``observed_term``; None: no claim yet). None when another replica wrote in between: of two
        candidates racing for a free or expired lease exactly one wins. Unlike ``claim_leadership``,
        which claims on top of whatever is there (the Kubernetes Lease already decided who leads),
        this conditional update is itself the election of a database lease."""
        when = times.to_datetime(at)

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
                await check_fence(session, token, at)
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
                      .values(holder="", last_fenced_at=times.to_datetime(at))
                      .execution_options(synchronize_session=False))
            return bool((await session.execute(update)).rowcount == 1)  # type: ignore[attr-defined]

        return await self._commit(work)


async def check_fence(session: AsyncSession, fence: actions.FenceToken, at: float) -> None:
    """Refuse unless ``fence`` is the latest claim of its lease; locks the claim row until commit.

    An UPDATE, not a SELECT: it takes the row's write lock on every backend (PostgreSQL and
    MariaDB re-check the WHERE clause against a concurrent claim's committed row; SQLite has one
    writer), so a claim either commits before this check and is seen, or waits for this intent.
    """
    update = (sa.update(tables.LeadershipRow)
              .where(tables.LeadershipRow.lease == fence.lease, tables.LeadershipRow.holder == fence.holder,
                     tables.LeadershipRow.term == fence.term)
              .values(last_fenced_at=times.to_datetime(at))
              .execution_options(synchronize_session=False))
    if (await session.execute(update)).rowcount == 1:  # type: ignore[attr-defined]
        return
    current = await session.get(tables.LeadershipRow, fence.lease)
    now_held = "nobody" if current is None else f"{current.holder} (term {current.term})"
    raise actions.FencedError(f"leadership token {fence.describe()} is not current: {fence.lease} is held by "
                              f"{now_held}")
