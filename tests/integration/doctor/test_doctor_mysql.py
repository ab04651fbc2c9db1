"""`trainguard doctor` on the local MySQL-compatible server (MariaDB): a good audit database reached
as a user with a password (never shown), a wrong port, and a user that may read but not write."""

from __future__ import annotations

import asyncio
import secrets

import pytest
import sqlalchemy as sa

from tests.support import mysql
from tests.support.doctor import run_doctor
from trainguard.store import database

pytestmark = [pytest.mark.integration, pytest.mark.mysql]


def test_mysql_good_wrong_port_and_read_only_user(mysql_server: mysql.MysqlServer,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    with mysql.scratch_database(mysql_server, "tg_doctor") as url:
        async def migrate() -> None:
            store = await database.open_store(url)
            await store.close()

        asyncio.run(migrate())
        parsed = sa.make_url(url)
        writer, reader = f"tg_rw_{secrets.token_hex(3)}", f"tg_ro_{secrets.token_hex(3)}"
        writer_pw, reader_pw = secrets.token_hex(8), secrets.token_hex(8)
        asyncio.run(mysql.admin(
            mysql_server,
            f"CREATE USER '{writer}'@'%' IDENTIFIED BY '{writer_pw}'",
            f"GRANT ALL ON `{parsed.database}`.* TO '{writer}'@'%'",
            f"CREATE USER '{reader}'@'%' IDENTIFIED BY '{reader_pw}'",
            f"GRANT SELECT ON `{parsed.database}`.* TO '{reader}'@'%'"))
        try:
            good_url = parsed.set(username=writer, password=writer_pw)
            good = run_doctor(monkeypatch, "--db", good_url.render_as_string(hide_password=False))
            assert good.code == 0, good.checks
            assert [good.status(n) for n in ("database", "database.schema", "database.writable")] == ["ok"] * 3
            assert writer_pw not in str(good.checks)

            bad = run_doctor(monkeypatch, "--db", good_url.set(port=9).render_as_string(hide_password=False))
            assert bad.code == 1 and bad.failed() == ["database"]
            assert ":9/" in bad.check("database")["message"] and writer_pw not in str(bad.checks)

            run = run_doctor(monkeypatch, "--db", parsed.set(username=reader, password=reader_pw)
                             .render_as_string(hide_password=False))
            assert run.code == 1
            assert run.failed() == ["database.writable"]
            assert run.status("database") == "ok" and run.status("database.schema") == "ok"
            assert "denied" in run.check("database.writable")["message"]
        finally:
            asyncio.run(mysql.admin(mysql_server, f"DROP USER IF EXISTS '{writer}'@'%'",
                                    f"DROP USER IF EXISTS '{reader}'@'%'"))
