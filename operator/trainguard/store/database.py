"""Opening the audit database: URL -> async engine -> migrated schema -> ``AuditStore``.

Place in the loop: the entry point of ``store/``. The engine (or ``trainguard run``) opens
the store once at start, which runs ``alembic upgrade head`` on the live async engine so a
new release migrates its own database; ``trainguard audit`` opens it read-only (no
migration, no file creation). Supported URLs: ``sqlite+aiosqlite:///PATH`` (embedded
default; WAL, foreign keys on, full fsync so an acknowledged record survives a crash),
``postgresql+asyncpg://...`` (production) and ``mysql+aiomysql://...`` (MySQL 8 or MariaDB
10.11+; ``mariadb+aiomysql://`` and, when the asyncmy package is installed, ``mysql+asyncmy://``
work too). Plain ``sqlite:///``, ``postgresql://``, ``mysql://`` and ``mariadb://`` are accepted
and mapped to those drivers. Every failure to open is a ``StoreError`` whose message carries the
URL without its password.

MySQL/MariaDB specifics (docs/store.md): connections speak ``utf8mb4`` (a URL may still name its
own ``charset``); transactions run at READ COMMITTED, the isolation the store's code was written
against on PostgreSQL (each statement sees what others committed before it, so a retry after a
lost insert race finds the winner's row, and InnoDB takes no gap locks that would turn concurrent
inserts into deadlocks); and migrations hold a named lock (``GET_LOCK``) for the database, so
replicas that start together migrate one after the other instead of racing on DDL, which MySQL
commits statement by statement.
"""

from __future__ import annotations

import hashlib
import pathlib
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic import config as alembic_config
from sqlalchemy import exc as sa_exc
from sqlalchemy import pool
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from trainguard.store import audit, location

CONNECT_TIMEOUT_S = 10.0
"""How long to wait for a database server before failing with a clear error (seconds).
Long enough for a busy server, short enough that a wrong host fails the start visibly."""

SQLITE_BUSY_TIMEOUT_S = 30.0
"""How long an SQLite writer waits for another process's lock (seconds): the CLI may read
while the operator writes."""

_ASYNC_DRIVERS = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+asyncpg", "postgres": "postgresql+asyncpg",
                  "mysql": "mysql+aiomysql", "mariadb": "mariadb+aiomysql"}
_MIGRATIONS = pathlib.Path(__file__).parent / "alembic"
_MYSQL = ("mysql", "mariadb")

MYSQL_ISOLATION = "READ COMMITTED"
"""Transaction isolation on MySQL/MariaDB (whose default is REPEATABLE READ); see the module docstring."""

MYSQL_CHARSET = "utf8mb4"
MYSQL_COLLATION = "utf8mb4_bin"
"""The default a fresh MySQL/MariaDB audit database is given before its tables are created."""

MIGRATION_LOCK_TIMEOUT_S = 600
"""How long a replica waits on MySQL/MariaDB for another one's migration to finish (seconds)."""


default_db_path = location.default_db_path
DEFAULT_DB_URL = location.DEFAULT_DB_URL


class StoreError(RuntimeError):
    """The audit database cannot be used; the message says which one (password hidden) and why."""


class StoreNotFound(StoreError):
    """A read-only open found no database (e.g. the SQLite file does not exist)."""


def normalise_url(url: str) -> sa.URL:
    """Parse ``url`` and pick the async driver; raise StoreError on a malformed URL."""
    try:
        parsed = sa.make_url(url)
    except sa_exc.ArgumentError as exc:
        raise StoreError(f"invalid database URL {url!r}: expected e.g. sqlite+aiosqlite:///PATH") from exc
    backend, _, driver = parsed.drivername.partition("+")
    if not driver:
        if backend not in _ASYNC_DRIVERS:
            raise StoreError(f"unsupported database {safe_url(parsed)}: use sqlite, postgresql or mysql")
        parsed = parsed.set(drivername=_ASYNC_DRIVERS[backend])
    if backend in _MYSQL and "charset" not in parsed.query:
        # Without it the driver speaks the server's default character set (latin1 on MariaDB
        # 10.11), and a log line outside it cannot be stored.
        parsed = parsed.update_query_dict({"charset": "utf8mb4"})
    return parsed


def safe_url(url: sa.URL | str) -> str:
    """The URL as text with any password masked, for messages and logs."""
    if isinstance(url, str):
        try:
            url = sa.make_url(url)
        except sa_exc.ArgumentError:
            return "<unparseable URL>"
    return url.render_as_string(hide_password=True)


def sqlite_path(url: sa.URL) -> pathlib.Path | None:
    """The file behind an SQLite URL; None for other backends or an in-memory database."""
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    return pathlib.Path(url.database).expanduser()


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")
    finally:
        cursor.close()


def _sqlite_pragmas_readonly(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA query_only=ON")
    finally:
        cursor.close()


def make_engine(url: sa.URL, *, readonly: bool = False) -> AsyncEngine:
    """An async engine for ``url`` with per-backend connect timeouts and SQLite pragmas.

    ``readonly`` SQLite connections refuse writes (``query_only``) and leave the journal
    mode alone, so a viewer never changes the file.
    """
    backend = url.get_backend_name()
    kwargs: dict[str, Any] = {"pool_pre_ping": backend != "sqlite"}
    if backend == "sqlite":
        kwargs["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_S}
        if sqlite_path(url) is None:
            kwargs["poolclass"] = pool.StaticPool
    elif backend == "postgresql":
        kwargs["connect_args"] = {"timeout": CONNECT_TIMEOUT_S}
    elif backend in _MYSQL:
        kwargs["connect_args"] = {"connect_timeout": int(CONNECT_TIMEOUT_S)}
        kwargs["isolation_level"] = MYSQL_ISOLATION
    try:
        engine = create_async_engine(url, **kwargs)
    except (sa_exc.ArgumentError, sa_exc.NoSuchModuleError, sa_exc.InvalidRequestError, ImportError) as exc:
        raise StoreError(f"cannot use database {safe_url(url)}: {exc}") from exc
    if backend == "sqlite":
        sa.event.listen(engine.sync_engine, "connect", _sqlite_pragmas_readonly if readonly else _sqlite_pragmas)
    return engine


MIGRATION_LOCK_KEY = 0x7472_6770_6D69_6772
"""PostgreSQL advisory lock id held while migrating (the ASCII of "trgpmigr"); MySQL uses a named
lock per database (``_upgrade_head``). Several replicas starting at once then migrate one after the other:
the first applies the migrations, the rest find the schema at head and do nothing."""


def _lock_migrations(connection: Connection) -> None:
    """PostgreSQL: hold the migration lock for the rest of this connection's transaction. SQLite needs
    none (one file, one writer; several replicas need a server); MySQL takes its named lock in
    ``_upgrade_head``, released there, since it belongs to the session, which outlives the
    transaction in the pool."""
    if connection.dialect.name == "postgresql":
        connection.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})


def _upgrade_head(connection: Connection) -> None:
    cfg = alembic_config.Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    cfg.attributes["connection"] = connection
    if connection.dialect.name not in _MYSQL:
        _lock_migrations(connection)  # PostgreSQL: an advisory lock until the transaction ends
        command.upgrade(cfg, "head")
        return
    # MySQL commits each DDL statement on its own, so two replicas migrating one fresh database at
    # once both create the same tables and one fails. A named lock (per server, so it is named
    # after the database) makes the second wait and then find the schema at head.
    name = "trainguard-migrate-" + hashlib.sha256(str(connection.engine.url.database).encode()).hexdigest()[:40]
    got = connection.execute(sa.text("SELECT GET_LOCK(:name, :timeout)"),
                             {"name": name, "timeout": MIGRATION_LOCK_TIMEOUT_S}).scalar()
    if got != 1:
        raise StoreError(f"another Trainguard has been migrating {safe_url(connection.engine.url)} for "
                         f"{MIGRATION_LOCK_TIMEOUT_S} s (MySQL lock {name} held)")
    try:
        if current_revision(connection) is None:
            _mysql_text_defaults(connection)
        command.upgrade(cfg, "head")
    finally:
        connection.execute(sa.text("SELECT RELEASE_LOCK(:name)"), {"name": name})


def _mysql_text_defaults(connection: Connection) -> None:
    """Before the first migration: make the database's default ``utf8mb4`` with binary collation.

    The tables take the database's defaults. A stock MariaDB 10.11 database is latin1 (a log line in
    another script cannot be stored), and every stock default collation ignores case, so workloads
    ``a`` and ``A`` would share one key and a lookup would find the wrong one.
    ``utf8mb4_bin`` compares as SQLite and PostgreSQL do. A database already in use (a schema
    revision present) is left alone.
    """
    database = connection.engine.url.database
    charset, collation = connection.execute(sa.text(
        "SELECT DEFAULT_CHARACTER_SET_NAME, DEFAULT_COLLATION_NAME FROM information_schema.SCHEMATA "
        "WHERE SCHEMA_NAME = DATABASE()")).one()
    if (charset, collation) == (MYSQL_CHARSET, MYSQL_COLLATION):
        return
    quoted = connection.dialect.identifier_preparer.quote_identifier(str(database))
    try:
        connection.execute(sa.text(f"ALTER DATABASE {quoted} CHARACTER SET {MYSQL_CHARSET} COLLATE {MYSQL_COLLATION}"))
    except sa_exc.DBAPIError as exc:
        raise StoreError(
            f"{safe_url(connection.engine.url)} defaults to {charset}/{collation} and cannot be changed "
            f"({_first_line(exc)}): create it with CHARACTER SET {MYSQL_CHARSET} COLLATE {MYSQL_COLLATION}, "
            "or grant ALTER on it") from exc


def head_revision() -> str | None:
    """The Alembic revision this release migrates to (``trainguard doctor`` compares a database with it)."""
    from alembic.script import ScriptDirectory

    cfg = alembic_config.Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    return ScriptDirectory.from_config(cfg).get_current_head()


def known_revisions() -> set[str]:
    """Every revision id this release knows (a database at another one is from a newer release)."""
    from alembic.script import ScriptDirectory

    cfg = alembic_config.Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    return {rev.revision for rev in ScriptDirectory.from_config(cfg).walk_revisions()}


def current_revision(connection: Connection) -> str | None:
    """The database's Alembic revision; None for a database never migrated."""
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(connection).get_current_revision()


def _has_audit_log(connection: Connection) -> bool:
    return sa.inspect(connection).has_table("audit_log")


async def open_store(
    url: str, *, readonly: bool = False, context: audit.AuditContext | None = None,
) -> audit.AuditStore:
    """Open (and, unless ``readonly``, create and migrate) the audit database at ``url``.

    ``readonly`` is for viewers such as ``trainguard audit``: a missing SQLite file or an
    empty database is an error (StoreNotFound) instead of being created.
    """
    parsed = normalise_url(url)
    path = sqlite_path(parsed)
    if path is not None:
        if readonly and not path.is_file():
            raise StoreNotFound(f"no audit database at {path} ({safe_url(parsed)})")
        if not readonly:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create the folder for {safe_url(parsed)}: {exc}") from exc
    engine = make_engine(parsed, readonly=readonly)
    try:
        async with engine.begin() as connection:
            if readonly:
                if not await connection.run_sync(_has_audit_log):
                    raise StoreNotFound(f"{safe_url(parsed)} holds no Trainguard audit log (never written?)")
            else:
                await connection.run_sync(_upgrade_head)
    except StoreError:
        await engine.dispose()
        raise
    except (sa_exc.SQLAlchemyError, OSError, TimeoutError) as exc:
        await engine.dispose()
        raise StoreError(f"cannot open audit database {safe_url(parsed)}: {_first_line(exc)}") from exc
    except Exception as exc:
        # Driver-specific errors that SQLAlchemy does not wrap (e.g. asyncpg's auth
        # failures raised during connect); never let them surface as a traceback.
        await engine.dispose()
        raise StoreError(f"cannot open audit database {safe_url(parsed)}: {type(exc).__name__}: {exc}") from exc
    return audit.AuditStore(engine, context=context or audit.AuditContext())


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc) or type(exc).__name__
    return text.strip().splitlines()[0]
