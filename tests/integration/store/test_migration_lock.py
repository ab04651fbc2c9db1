"""Replicas that start at once migrate one after the other (the chart's `trainguard db upgrade` init
containers of several replicas, or several operators opening the store): on PostgreSQL the
migration holds an advisory lock, so every process ends with the schema at head and none fails on
a table another one created a moment earlier."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from tests.support import postgres
from trainguard.store import database

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

PROCESSES = 4
ROUNDS = 3
"""Without the lock, one round of four fails about every other time on a busy 2-core machine."""


def _upgrade_processes(url: str) -> list[subprocess.CompletedProcess[str]]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("TRAINGUARD_")}
    env["TRAINGUARD_DB_URL"] = url
    started = [subprocess.Popen([sys.executable, "-m", "trainguard.cli.main", "db", "upgrade"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(PROCESSES)]
    done = []
    for process in started:
        out, err = process.communicate(timeout=300)
        done.append(subprocess.CompletedProcess(process.args, process.returncode, out, err))
    return done


async def _revision(url: str) -> str | None:
    engine = create_async_engine(url)
    try:
        async with engine.connect() as connection:
            return (await connection.execute(sa.text("SELECT version_num FROM alembic_version"))).scalar()
    finally:
        await engine.dispose()


@pytest.mark.postgres
def test_concurrent_upgrades_of_a_new_database_all_succeed(postgres_server: postgres.PostgresServer) -> None:
    for _ in range(ROUNDS):
        with postgres.scratch_database(postgres_server.admin_url, "tg_migrate") as url:
            results = _upgrade_processes(url)
            for result in results:
                assert result.returncode == 0, result.stderr
                assert "at revision" in result.stdout
            assert asyncio.run(_revision(url)) == database.head_revision()


async def _create_database(server_url: str, name: str) -> None:
    engine = create_async_engine(server_url)
    try:
        async with engine.begin() as connection:
            await connection.execute(sa.text(f"CREATE DATABASE `{name}`"))
    finally:
        await engine.dispose()


@pytest.mark.mariadb
def test_concurrent_upgrades_on_mariadb_all_succeed(mariadb_url: str) -> None:
    """MySQL/MariaDB: the named lock per database (GET_LOCK) serialises the migrations."""
    for round_ in range(ROUNDS):
        name = f"tg_migrate_{os.getpid()}_{round_}"
        asyncio.run(_create_database(mariadb_url, name))
        url = f"{mariadb_url}{name}"
        for result in _upgrade_processes(url):
            assert result.returncode == 0, result.stderr
        assert asyncio.run(_revision(url)) == database.head_revision()


async def _open_twice(url: str) -> None:
    first = await database.open_store(url)
    try:
        # a second writer while the first is open (e.g. an old and a new operator): the first
        # must not keep holding the migration lock after its migration
        second = await asyncio.wait_for(database.open_store(url), 60)
        await second.close()
    finally:
        await first.close()


@pytest.mark.mariadb
def test_migration_lock_is_released_after_the_migration_on_mariadb(mariadb_url: str) -> None:
    name = f"tg_migrate_{os.getpid()}_twice"
    asyncio.run(_create_database(mariadb_url, name))
    asyncio.run(_open_twice(f"{mariadb_url}{name}"))
