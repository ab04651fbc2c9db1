"""Database URLs for the three backends: the async driver picked, MySQL's connection character set
added, and passwords hidden wherever a URL is shown (messages, ``--print-config``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainguard.cli import main
from trainguard.store import database

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("given", "expected"), [
    ("sqlite:///tmp/a.db", "sqlite+aiosqlite:///tmp/a.db"),
    ("postgresql://tg@db/trainguard", "postgresql+asyncpg://tg@db/trainguard"),
    ("mysql://tg@db:3306/trainguard", "mysql+aiomysql://tg@db:3306/trainguard?charset=utf8mb4"),
    ("mariadb://tg@db/trainguard", "mariadb+aiomysql://tg@db/trainguard?charset=utf8mb4"),
    ("mysql+aiomysql://tg@db/trainguard", "mysql+aiomysql://tg@db/trainguard?charset=utf8mb4"),
    ("mysql+asyncmy://tg@db/trainguard", "mysql+asyncmy://tg@db/trainguard?charset=utf8mb4"),
    ("mysql+aiomysql://tg@db/trainguard?charset=utf8mb3", "mysql+aiomysql://tg@db/trainguard?charset=utf8mb3"),
])
def test_each_backend_gets_its_async_driver(given: str, expected: str) -> None:
    assert database.normalise_url(given).render_as_string(hide_password=False) == expected


def test_a_mysql_password_never_shows() -> None:
    url = "mysql+aiomysql://trainguard:s3cret@db.internal:3306/trainguard"
    assert "s3cret" not in database.safe_url(url)
    assert "s3cret" not in database.safe_url(database.normalise_url(url))


def test_an_unsupported_database_names_the_three(tmp_path: Path) -> None:
    with pytest.raises(database.StoreError, match="sqlite, postgresql or mysql") as info:
        database.normalise_url("oracle://scott:tiger@db/orcl")
    assert "tiger" not in str(info.value)


def test_print_config_hides_a_mysql_password_from_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("TRAINGUARD_DB_URL", "TRAINGUARD_DB_URL_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TRAINGUARD_HOME", str(tmp_path / "home"))
    secret = tmp_path / "db-url"
    secret.write_text("mysql+aiomysql://trainguard:s3cret@mysql.trainguard.svc:3306/trainguard\n")
    assert main.main(["operator", "--db-file", str(secret), "--print-config"]) == 0
    out = capsys.readouterr().out
    assert "s3cret" not in out
    printed = json.loads(out)
    assert printed["settings"]["db_url_file"]["source"] == "flag --db-file"
