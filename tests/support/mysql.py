"""pytest plugin: the local MariaDB (MySQL-compatible) server for the audit store's MySQL backend.

``mysql_server`` is a session fixture: it brings the server up once per session through
``hack/local-mysql.sh`` (or reuses a running one) and stops it at the end if pytest started it
(``tests.support.services``). ``scratch_database`` creates a database for one test or session
and drops it afterwards; the URL it yields logs in as the script's application user
``trainguard`` with its password, as a production install would, not as root. ``mysql_url`` is
such a database for the whole session. Tests marked ``mysql`` (or ``mariadb``, its former name)
are skipped only when ``TG_SKIP_MYSQL=1``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import aiomysql
import pytest
import sqlalchemy as sa

from . import services

SCRIPT = services.HACK_DIR / "local-mysql.sh"


def state_dir() -> Path:
    """The directory hack/local-mysql.sh uses (``TG_MYSQL_DIR`` or ``.local/mysql``)."""
    return Path(os.environ.get("TG_MYSQL_DIR") or services.REPO_ROOT / ".local" / "mysql")


@dataclasses.dataclass(frozen=True)
class MysqlServer:
    """A running local MariaDB."""

    admin_url: str
    """SQLAlchemy URL of the server as root (no database): creates and drops scratch databases."""
    app_url: str
    """SQLAlchemy URL of the ``trainguard`` database as the application user (with its password)."""
    port: int
    version: str
    """``SELECT VERSION()``, e.g. ``10.11.19-MariaDB-0+deb12u1``."""
    started: bool
    """True when this session started the server."""


async def _execute(admin_url: str, *statements: str) -> None:
    url = sa.make_url(admin_url)
    conn = await aiomysql.connect(host=url.host, port=url.port, user=url.username or "root",
                                  password=url.password or "", connect_timeout=30)
    try:
        async with conn.cursor() as cursor:
            for statement in statements:
                await cursor.execute(statement)
    finally:
        conn.close()


async def admin(server: MysqlServer, *statements: str) -> None:
    """Run ``statements`` as root (users, grants); the caller builds them from names it chose."""
    await _execute(server.admin_url, *statements)


@contextlib.contextmanager
def scratch_database(server: MysqlServer, prefix: str = "tg_test") -> Iterator[str]:
    """A database created on ``server`` by root, yielded as the application user's URL, dropped after.

    Created with the server's stock defaults (latin1 on MariaDB 10.11), as a DBA's plain
    ``CREATE DATABASE`` would be: the store must cope with that.

    ``prefix`` must start with ``tg_``: the application user may use those databases only.
    """
    if not prefix.startswith("tg_"):
        raise ValueError(f"scratch databases are named tg_...: the application user has no rights on {prefix!r}")
    database = f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"
    asyncio.run(_execute(server.admin_url, f"CREATE DATABASE `{database}`"))
    try:
        yield sa.make_url(server.app_url).set(database=database).render_as_string(hide_password=False)
    finally:
        asyncio.run(_execute(server.admin_url, f"DROP DATABASE IF EXISTS `{database}`"))


@pytest.fixture(scope="session")
def mysql_server() -> Iterator[MysqlServer]:
    """The local MariaDB, up for the whole session."""
    if os.environ.get("TG_SKIP_MYSQL") == "1":
        pytest.skip("TG_SKIP_MYSQL=1")
    directory = state_dir()
    try:
        with services.shared_service(SCRIPT, directory, os.environ) as started:
            env = services.read_env_file(directory / "env")
            yield MysqlServer(admin_url=env["TG_MYSQL_ADMIN_URL"], app_url=env["TG_MYSQL_URL"],
                              port=int(env["TG_MYSQL_PORT"]), version=env.get("TG_MYSQL_VERSION", ""),
                              started=started)
    except services.ServiceError as exc:
        pytest.fail(f"local MariaDB: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def mysql_url(mysql_server: MysqlServer) -> Iterator[str]:
    """SQLAlchemy async URL of a database created for this test session (dropped afterwards)."""
    with scratch_database(mysql_server, "tg_session") as url:
        yield url


@pytest.fixture(scope="session")
def mariadb_url(mysql_server: MysqlServer) -> str:
    """The former fixture's value: the server as root, no database (``mysql+aiomysql://root@127.0.0.1:PORT/``).

    Kept for tests written against it; new tests use ``mysql_server`` and ``scratch_database``."""
    return mysql_server.admin_url
