"""The store suite runs every test against SQLite (a file in tmp_path), PostgreSQL and MariaDB.

The PostgreSQL part uses the session fixture ``postgres_url`` (tests/support/postgres.py), the
MariaDB part ``mariadb_url`` (tests/support/mariadb.py); each test gets a database of its own,
created on that server and dropped after.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from pathlib import Path

import aiomysql
import pytest
import sqlalchemy as sa

from tests.support import postgres

BACKENDS = [
    pytest.param("sqlite", marks=[pytest.mark.integration], id="sqlite"),
    pytest.param("postgres", marks=[pytest.mark.integration, pytest.mark.postgres], id="postgres"),
    pytest.param("mariadb", marks=[pytest.mark.integration, pytest.mark.mariadb], id="mariadb"),
]


async def _mariadb_admin(server_url: sa.URL, statement: str) -> None:
    conn = await aiomysql.connect(host=server_url.host, port=server_url.port, user=server_url.username or "root",
                                  password=server_url.password or "", connect_timeout=30)
    try:
        async with conn.cursor() as cursor:
            await cursor.execute(statement)
    finally:
        conn.close()


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database URL for one test (sync: ``postgres_url`` runs its own loop)."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'state' / 'audit.db'}"
        return
    if request.param == "mariadb":
        server_url = sa.make_url(request.getfixturevalue("mariadb_url"))
        database = f"tg_store_{secrets.token_hex(6)}"
        asyncio.run(_mariadb_admin(server_url, f"CREATE DATABASE `{database}`"))
        try:
            yield server_url.set(database=database).render_as_string(hide_password=False)
        finally:
            asyncio.run(_mariadb_admin(server_url, f"DROP DATABASE IF EXISTS `{database}`"))
        return
    with postgres.scratch_database(request.getfixturevalue("postgres_url"), "tg_store") as url:
        yield url
