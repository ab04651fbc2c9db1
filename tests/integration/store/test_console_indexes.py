"""Migration 0007 on real PostgreSQL: audit search by kind or producer, newest first, reads an index
in id order instead of walking the whole log backwards.

The shape that needed it (``benchmarks/api_console.py``): the wanted kind is rare among recent
rows (recovery trails long ago, then a flood of other records). Without ``(kind, id)`` the planner
walks the primary key backwards and filters, reading most of the table (200 ms on a million rows).
The plan is asserted, not a timing.
"""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import Iterator

import asyncpg
import pytest

from tests.support import postgres
from trainguard.store import database

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

ROWS = 60_000
RARE = 300
START = datetime.datetime(2026, 11, 1, tzinfo=datetime.UTC)


@pytest.fixture
def pg_url(postgres_url: str) -> Iterator[str]:
    with postgres.scratch_database(postgres_url, "tg_indexes") as url:
        yield url


async def _plan(url: str, sql: str) -> str:
    store = await database.open_store(url)  # migrations up to head
    await store.close()
    dsn = url.replace("postgresql+asyncpg://", "postgresql://", 1)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("INSERT INTO workloads (id, first_seen, last_seen, scheduler, job_id, policy, comment, "
                           "opt_in_errors, state) VALUES ('w', now(), now(), '', '', '', '', '[]', '')")
        records = [(START + datetime.timedelta(seconds=n), "w", 0,
                    "outcome" if n < RARE else "anomaly", json.dumps({"n": n}),
                    "watchdog" if n < RARE else "detector", "", "", "") for n in range(ROWS)]
        await conn.copy_records_to_table("audit_log", records=records, columns=[
            "time", "workload", "attempt", "kind", "payload", "decided_by", "policy_version", "catalog_version",
            "settings_fingerprint"])
        await conn.execute("ANALYZE audit_log")
        return "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + sql))
    finally:
        await conn.close()


def test_search_by_kind_newest_first_reads_the_kind_index(pg_url: str) -> None:
    plan = asyncio.run(_plan(pg_url, "SELECT * FROM audit_log WHERE kind IN ('outcome') ORDER BY id DESC LIMIT 51"))
    assert "ix_audit_log_kind_id" in plan, plan


def test_search_by_producer_newest_first_reads_the_producer_index(pg_url: str) -> None:
    plan = asyncio.run(_plan(pg_url, "SELECT * FROM audit_log WHERE decided_by IN ('watchdog') "
                                     "ORDER BY id DESC LIMIT 51"))
    assert "ix_audit_log_decided_by_id" in plan, plan
