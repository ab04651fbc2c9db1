"""What only MySQL/MariaDB needs from the store: the isolation level the code was written against,
migrations that replicas starting together do not race, and the database's text defaults."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from tests.support import mysql
from trainguard.store import audit, database

pytestmark = [pytest.mark.integration, pytest.mark.mysql]


@pytest.fixture
def mysql_db(mysql_server: mysql.MysqlServer) -> Iterator[str]:
    """A fresh database with the server's stock defaults, as the application user."""
    with mysql.scratch_database(mysql_server, "tg_mysql") as url:
        yield url


async def test_replicas_starting_together_migrate_one_fresh_database(mysql_db: str) -> None:
    """Three replicas open the same empty database at once: all start, the schema is at head once."""
    results = await asyncio.gather(*(database.open_store(mysql_db) for _ in range(3)), return_exceptions=True)
    stores = [r for r in results if isinstance(r, audit.AuditStore)]
    try:
        assert len(stores) == 3, [r for r in results if not isinstance(r, audit.AuditStore)]
        async with stores[0].sql_engine.connect() as conn:
            assert await conn.run_sync(database.current_revision) == database.head_revision()
            versions = (await conn.execute(sa.text("SELECT COUNT(*) FROM alembic_version"))).scalar()
        assert versions == 1
    finally:
        for store in stores:
            await store.close()


async def test_a_running_replica_does_not_block_the_next_ones_start(mysql_db: str) -> None:
    """The migration lock is released when the migration ends: MySQL's named locks belong to the
    session, and the migrating connection goes back to the pool of a replica that keeps running."""
    first = await database.open_store(mysql_db)
    try:
        second = await asyncio.wait_for(database.open_store(mysql_db), timeout=60)
        await second.close()
    finally:
        await first.close()


async def test_a_fresh_database_gets_utf8mb4_with_binary_collation(mysql_db: str) -> None:
    store = await database.open_store(mysql_db)
    try:
        async with store.sql_engine.connect() as conn:
            defaults = (await conn.execute(sa.text(
                "SELECT DEFAULT_CHARACTER_SET_NAME, DEFAULT_COLLATION_NAME FROM information_schema.SCHEMATA "
                "WHERE SCHEMA_NAME = DATABASE()"))).one()
            workloads = (await conn.execute(sa.text(
                "SELECT TABLE_COLLATION FROM information_schema.TABLES "
                "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'workloads'"))).scalar()
        assert tuple(defaults) == ("utf8mb4", "utf8mb4_bin")
        assert workloads == "utf8mb4_bin"
    finally:
        await store.close()


async def test_transactions_run_at_read_committed(mysql_db: str) -> None:
    """The documented choice (store/database.py): PostgreSQL's isolation, not MySQL's REPEATABLE READ."""
    store = await database.open_store(mysql_db)
    try:
        async with store.sql_engine.connect() as conn:
            assert await conn.get_isolation_level() == "READ COMMITTED"
    finally:
        await store.close()


async def test_a_database_in_use_keeps_its_defaults(mysql_db: str) -> None:
    """Only an empty database is given new defaults: one migrated before is not altered under its data."""
    first = await database.open_store(mysql_db)
    async with first.sql_engine.begin() as conn:
        await conn.execute(sa.text("ALTER DATABASE CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci"))
    await first.close()
    again = await database.open_store(mysql_db)
    try:
        async with again.sql_engine.connect() as conn:
            collation = (await conn.execute(sa.text("SELECT @@collation_database"))).scalar()
        assert collation == "utf8mb4_general_ci"
    finally:
        await again.close()


async def test_every_migration_goes_down_to_base_and_up_again(mysql_db: str) -> None:
    """0010 .. 0001 downgrade and upgrade again on MySQL, where each DDL statement commits on its own."""
    from alembic import command
    from alembic import config as alembic_config

    def downgrade(connection: sa.Connection) -> None:
        cfg = alembic_config.Config()
        cfg.set_main_option("script_location", str(database._MIGRATIONS))
        cfg.attributes["connection"] = connection
        command.downgrade(cfg, "base")

    store = await database.open_store(mysql_db)
    try:
        async with store.sql_engine.begin() as conn:
            await conn.run_sync(downgrade)
        async with store.sql_engine.connect() as conn:
            assert await conn.run_sync(database.current_revision) is None
            tables = (await conn.execute(sa.text("SHOW TABLES"))).scalars().all()
        assert set(tables) <= {"alembic_version"}
    finally:
        await store.close()
    again = await database.open_store(mysql_db)
    try:
        async with again.sql_engine.connect() as conn:
            assert await conn.run_sync(database.current_revision) == database.head_revision()
    finally:
        await again.close()
