"""Checks of the audit database: it opens, its schema is this release's, and it takes writes.

Doctor changes nothing: it never creates the SQLite file nor migrates (``trainguard run`` does
both at start); the write probe creates a table inside a transaction that is rolled back.
"""

from __future__ import annotations

import os
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from trainguard.doctor.report import Check, fail, ok, warn
from trainguard.store import database

SETTING = "--db / TRAINGUARD_DB_URL / --db-file"
PROBE_TABLE = "trainguard_doctor_probe"


def _nearest_dir(path: Path) -> Path:
    for parent in [path.parent, *path.parent.parents]:
        if parent.exists():
            return parent
    return Path("/")


async def checks(url: str) -> list[Check]:
    """``database`` (connect), ``database.schema`` (Alembic revision) and ``database.writable``."""
    try:
        parsed = database.normalise_url(url)
    except database.StoreError as exc:
        return [fail("database", str(exc), f"fix {SETTING}")]
    shown = database.safe_url(parsed)
    path = database.sqlite_path(parsed)
    if path is not None and not path.is_file():
        folder = _nearest_dir(path)
        if path.exists() or not os.access(folder, os.W_OK | os.X_OK):
            return [fail("database", f"{shown}: no database file, and {folder} is not a writable folder to create "
                         "it in", f"fix {SETTING} or the folder's permissions")]
        return [warn("database", f"{shown}: no database yet; trainguard run creates it (folder {folder} is "
                     "writable)", "run trainguard run once, or point --db at the existing audit database")]
    engine = database.make_engine(parsed)
    try:
        try:
            async with engine.connect() as conn:
                revision = await conn.run_sync(database.current_revision)
        except Exception as exc:
            return [fail("database", f"cannot connect to {shown}: {_first_line(exc)}",
                         f"fix {SETTING}: host, port, database name and credentials; check the server runs")]
        result = [ok("database", f"connected to {shown}")]
        result.append(_schema(revision))
        result.append(await _writable(engine, shown, revision is not None))
        return result
    finally:
        await engine.dispose()


def _schema(revision: str | None) -> Check:
    head = database.head_revision()
    if revision is None:
        return warn("database.schema", f"empty database (no Alembic revision); trainguard run creates the schema "
                    f"(revision {head})", "nothing to do, unless you expected an existing audit log here")
    if revision == head:
        return ok("database.schema", f"Alembic revision {revision} (current)")
    if revision in database.known_revisions():
        return warn("database.schema", f"Alembic revision {revision}, this release's is {head}: trainguard run "
                    "migrates it at start", "let trainguard run (or operator) start once to migrate")
    return fail("database.schema", f"Alembic revision {revision} is unknown to this release (head {head}): the "
                "database was written by a newer Trainguard", "run the Trainguard release that wrote it, or a "
                "newer one")


def _probe(connection: Connection, migrated: bool) -> None:
    """A write the recovery loop's own user must be allowed: a row in a Trainguard table once the
    schema exists (INSERT), else a table (CREATE, which the first migration needs)."""
    if migrated:
        connection.execute(sa.text("INSERT INTO alembic_version (version_num) VALUES ('doctor-probe')"))
    else:
        connection.execute(sa.text(f"CREATE TABLE {PROBE_TABLE} (x INTEGER)"))


async def _writable(engine: AsyncEngine, shown: str, migrated: bool) -> Check:
    """One write in a transaction that is rolled back (MySQL commits DDL: the probe table is dropped)."""
    try:
        async with engine.connect() as conn:
            trans = await conn.begin()
            try:
                await conn.run_sync(_probe, migrated)
            finally:
                await trans.rollback()
            if engine.dialect.name in ("mysql", "mariadb"):
                await conn.execute(sa.text(f"DROP TABLE IF EXISTS {PROBE_TABLE}"))
                await conn.commit()
    except Exception as exc:
        return fail("database.writable", f"{shown} refuses writes: {_first_line(exc)}",
                    "grant the database user INSERT, UPDATE and CREATE on the audit database (or fix the file's "
                    "permissions / read-only mount)")
    return ok("database.writable", f"{shown} takes writes (probe rolled back)")


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc) or type(exc).__name__
    return text.strip().splitlines()[0][:300]
