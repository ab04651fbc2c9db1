"""The HTTP API suite runs against SQLite (a file in tmp_path), the local PostgreSQL
(``postgres_url``, tests/support/postgres.py) and the local MySQL-compatible server (``mysql_server``,
tests/support/mysql.py), each test on a database of its own; ``store`` is the audit store opened on
that database for one test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.support import mysql, postgres
from trainguard.store import audit, database

BACKENDS = [
    pytest.param("sqlite", marks=[pytest.mark.integration], id="sqlite"),
    pytest.param("postgres", marks=[pytest.mark.integration, pytest.mark.postgres], id="postgres"),
    pytest.param("mysql", marks=[pytest.mark.integration, pytest.mark.mysql], id="mysql"),
]


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'state' / 'audit.db'}"
        return
    if request.param == "mysql":
        with mysql.scratch_database(request.getfixturevalue("mysql_server"), "tg_api") as url:
            yield url
        return
    with postgres.scratch_database(request.getfixturevalue("postgres_url"), "tg_api") as url:
        yield url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path / 'state' / 'audit.db'}"


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[audit.AuditStore]:
    opened = await database.open_store(db_url)
    try:
        yield opened
    finally:
        await opened.close()
