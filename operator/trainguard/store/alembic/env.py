"""Alembic environment for the audit store (async engines).

Two ways in: ``trainguard.store.database.open_store`` runs ``upgrade head`` on a
connection it already holds (passed as ``config.attributes["connection"]``), inside the
operator's own event loop; ``alembic -c alembic.ini upgrade head`` by hand builds an async
engine from ``TRAINGUARD_DB_URL`` (or ``sqlalchemy.url``) and runs in a fresh loop.
"""

from __future__ import annotations

import asyncio
import os

from alembic import context
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from trainguard.store import tables

config = context.config
target_metadata = tables.Base.metadata


def _configure_and_run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_with_own_engine(url: str) -> None:
    engine = create_async_engine(url)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_configure_and_run)
            await connection.commit()
    finally:
        await engine.dispose()


def _run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure_and_run(connection)
        return
    url = os.environ.get("TRAINGUARD_DB_URL") or config.get_main_option("sqlalchemy.url")
    if not url:
        raise SystemExit("set TRAINGUARD_DB_URL (e.g. sqlite+aiosqlite:///trainguard.db) to run migrations by hand")
    asyncio.run(_run_with_own_engine(url))


if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata)
    with context.begin_transaction():
        context.run_migrations()
else:
    _run_online()
