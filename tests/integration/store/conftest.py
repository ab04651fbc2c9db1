"""The store suite runs every test against SQLite (a file in tmp_path), PostgreSQL and MySQL/MariaDB.

The PostgreSQL part uses the session fixture ``postgres_url`` (tests/support/postgres.py), the
MySQL part ``mysql_server`` (tests/support/mysql.py, a MariaDB from hack/local-mysql.sh, logged
into as the application user with a password); each test gets a database of its own, created on
that server and dropped after.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import mysql, postgres

BACKENDS = [
    pytest.param("sqlite", marks=[pytest.mark.integration], id="sqlite"),
    pytest.param("postgres", marks=[pytest.mark.integration, pytest.mark.postgres], id="postgres"),
    pytest.param("mysql", marks=[pytest.mark.integration, pytest.mark.mysql], id="mysql"),
]


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database URL for one test (sync: the server fixtures run their own loops)."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'state' / 'audit.db'}"
        return
    if request.param == "mysql":
        with mysql.scratch_database(request.getfixturevalue("mysql_server"), "tg_store") as url:
            yield url
        return
    with postgres.scratch_database(request.getfixturevalue("postgres_url"), "tg_store") as url:
        yield url
