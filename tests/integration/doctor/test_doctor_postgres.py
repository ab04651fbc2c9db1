"""`trainguard doctor` on the real local PostgreSQL: a good audit database, a wrong port, and a user
that may read but not write (the database refuses the write probe)."""

from __future__ import annotations

import asyncio
import secrets

import asyncpg
import pytest
import sqlalchemy as sa

from tests.support.doctor import run_doctor
from trainguard.store import database

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


def _dsn(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


def test_postgres_good_wrong_port_and_read_only_user(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async def migrate() -> None:
        store = await database.open_store(postgres_url)
        await store.close()

    asyncio.run(migrate())
    good = run_doctor(monkeypatch, "--db", postgres_url)
    assert good.code == 0, good.checks
    assert [good.status(n) for n in ("database", "database.schema", "database.writable")] == ["ok"] * 3

    parsed = sa.make_url(postgres_url)
    wrong_port = parsed.set(port=9).render_as_string(hide_password=False)
    bad = run_doctor(monkeypatch, "--db", wrong_port)
    assert bad.code == 1 and bad.failed() == ["database"]
    assert ":9/" in bad.check("database")["message"]

    role = f"doctor_ro_{secrets.token_hex(3)}"

    async def read_only_role() -> None:
        conn = await asyncpg.connect(_dsn(postgres_url), timeout=30)
        try:
            await conn.execute(f"CREATE ROLE {role} LOGIN")
            await conn.execute(f"GRANT CONNECT ON DATABASE \"{parsed.database}\" TO {role}")
            await conn.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
            await conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
        finally:
            await conn.close()

    async def drop_role() -> None:
        conn = await asyncpg.connect(_dsn(postgres_url), timeout=30)
        try:
            await conn.execute(f"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {role}")
            await conn.execute(f"REVOKE ALL ON SCHEMA public FROM {role}")
            await conn.execute(f"REVOKE ALL ON DATABASE \"{parsed.database}\" FROM {role}")
            await conn.execute(f"DROP ROLE {role}")
        finally:
            await conn.close()

    asyncio.run(read_only_role())
    try:
        reader = parsed.set(username=role).render_as_string(hide_password=False)
        run = run_doctor(monkeypatch, "--db", reader)
        assert run.code == 1
        assert run.failed() == ["database.writable"]
        assert run.status("database") == "ok" and run.status("database.schema") == "ok"
        assert "permission denied" in run.check("database.writable")["message"]
    finally:
        asyncio.run(drop_role())
