"""pytest plugin: the local PostgreSQL for integration tests of the audit store.

``postgres_url`` is a session fixture: it brings PostgreSQL up once per session through
``hack/local-postgres.sh`` (or reuses a running one), creates a fresh database for the
session, and yields its SQLAlchemy URL (``postgresql+asyncpg://postgres@127.0.0.1:PORT/DB``).
The database is dropped at the end, and the server is stopped if pytest started it (see
``tests.support.services``). Tests marked ``postgres`` are skipped only when
``TG_SKIP_POSTGRES=1``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from . import services

SCRIPT = services.HACK_DIR / "local-postgres.sh"


def state_dir() -> Path:
    """The directory hack/local-postgres.sh uses (``TG_PG_DIR`` or ``.local/postgres``)."""
    return Path(os.environ.get("TG_PG_DIR") or services.REPO_ROOT / ".local" / "postgres")


@dataclasses.dataclass(frozen=True)
class PostgresServer:
    """A running local PostgreSQL."""

    admin_url: str
    """SQLAlchemy URL of the ``postgres`` maintenance database."""
    port: int
    started: bool
    """True when this session started the server."""


async def _execute(dsn: str, statement: str) -> None:
    conn = await asyncpg.connect(dsn, timeout=30)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


@contextlib.contextmanager
def scratch_database(server_url: str, prefix: str) -> Iterator[str]:
    """A database created on the server of ``server_url`` (an asyncpg SQLAlchemy URL), yielded as
    a URL of the same form, and dropped (with its connections) afterwards."""
    admin = server_url.replace("postgresql+asyncpg://", "postgresql://", 1)
    database = f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"
    asyncio.run(_execute(admin, f'CREATE DATABASE "{database}"'))
    try:
        yield server_url.rsplit("/", 1)[0] + "/" + database
    finally:
        asyncio.run(_execute(admin, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """The local PostgreSQL, up for the whole session."""
    if os.environ.get("TG_SKIP_POSTGRES") == "1":
        pytest.skip("TG_SKIP_POSTGRES=1")
    directory = state_dir()
    try:
        with services.shared_service(SCRIPT, directory, os.environ) as started:
            env = services.read_env_file(directory / "env")
            yield PostgresServer(admin_url=env["TG_PG_URL"], port=int(env["TG_PG_PORT"]), started=started)
    except services.ServiceError as exc:
        pytest.fail(f"local PostgreSQL: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """SQLAlchemy async URL of a database created for this test session (dropped afterwards)."""
    with scratch_database(postgres_server.admin_url, "trainguard_test") as url:
        yield url
