"""The local PostgreSQL (hack/local-postgres.sh) answers through SQLAlchemy's asyncpg driver.

This is the production path of the audit store, so the test goes through the same stack:
an async engine on the URL the ``postgres_url`` fixture yields.
"""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


async def test_async_engine_round_trip(postgres_url: str) -> None:
    engine = create_async_engine(postgres_url)
    try:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE probe (id serial PRIMARY KEY, note text NOT NULL)"))
            await conn.execute(text("INSERT INTO probe (note) VALUES (:a), (:b)"), {"a": "first", "b": "second"})
        async with engine.connect() as conn:
            rows = (await conn.execute(text("SELECT id, note FROM probe ORDER BY id"))).all()
            database = (await conn.execute(text("SELECT current_database()"))).scalar_one()
            version = (await conn.execute(text("SHOW server_version_num"))).scalar_one()
    finally:
        await engine.dispose()
    assert [(r.id, r.note) for r in rows] == [(1, "first"), (2, "second")]
    assert database == postgres_url.rsplit("/", 1)[1]
    assert database.startswith("trainguard_test_")
    assert int(version) >= 150000
