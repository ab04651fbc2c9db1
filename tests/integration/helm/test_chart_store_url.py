"""The MySQL subchart's generated database URL works with what the image contains (issue 26).

The subchart writes the store's URL into its Secret (``url`` key), with the scheme of
``mysql.urlScheme``. The image installs exactly ``requirements.lock``, so the driver that scheme
names must be pinned there, importable here, and the store must open the URL as rendered (only
the address and the credentials swapped for the test's MariaDB): otherwise the migration init
container of a ``mysql.enabled=true`` install fails at once.
"""

from __future__ import annotations

import asyncio
import base64
import importlib
import re
from typing import Any

import pytest
import sqlalchemy as sa

from tests.support import helm as helm_support
from tests.support import mysql as mysql_support
from trainguard.store import database

pytestmark = [pytest.mark.integration, pytest.mark.helm, pytest.mark.timeout(helm_support.BUILD_TIMEOUT_S)]

LOCK = helm_support.CHART.parents[1] / "requirements.lock"


def subchart_url(helm: helm_support.Helm) -> sa.URL:
    """The ``url`` of the Secret the subchart generates with its default values."""
    docs = helm.template("--set", "mysql.enabled=true", "--show-only", "charts/mysql/templates/secret.yaml")
    secrets: list[dict[str, Any]] = [d for d in docs if d["kind"] == "Secret"]
    assert len(secrets) == 1, docs
    return sa.make_url(base64.b64decode(secrets[0]["data"]["url"]).decode())


def locked_packages() -> set[str]:
    """Distribution names pinned in requirements.lock (normalised: lower case, ``-`` for ``_``)."""
    names = re.findall(r"^([A-Za-z0-9_.-]+)==", LOCK.read_text(), flags=re.MULTILINE)
    return {n.lower().replace("_", "-") for n in names}


def test_default_scheme_names_a_driver_the_image_installs(helm: helm_support.Helm) -> None:
    url = subchart_url(helm)
    assert url.get_backend_name() == "mysql", url.drivername
    driver = url.get_driver_name()
    assert driver in locked_packages(), f"{url.drivername}: {driver} is not in requirements.lock"
    importlib.import_module(driver)  # the same lock is installed in the test environment


@pytest.mark.mysql
def test_the_store_opens_the_rendered_url(helm: helm_support.Helm,
                                          mysql_server: mysql_support.MysqlServer) -> None:
    rendered = subchart_url(helm)
    with mysql_support.scratch_database(mysql_server, "tg_chart_url") as target:
        local = sa.make_url(target)
        # The rendered URL as is, pointed at the test's server: scheme, user options and query kept.
        url = rendered.set(host=local.host, port=local.port, username=local.username,
                           password=local.password, database=local.database)

        async def migrate_and_read() -> str:
            store = await database.open_store(url.render_as_string(hide_password=False))
            try:
                async with store.sql_engine.connect() as connection:
                    return str((await connection.execute(sa.text("SELECT version_num FROM alembic_version"))).scalar())
            finally:
                await store.close()

        assert asyncio.run(migrate_and_read()) == database.head_revision()
