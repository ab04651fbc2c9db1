"""`trainguard db upgrade`: migrate the audit database to this release's schema, then exit.

Every writer (``run``, ``operator``) already migrates the database it opens; this command does it on
its own so that an installation can migrate before the new version starts (the Helm chart runs it as
an init container). It reads the database settings exactly as ``run`` and ``operator`` do (``--db``,
``--db-file``, ``--home``, or TRAINGUARD_DB_URL, TRAINGUARD_DB_URL_FILE, TRAINGUARD_HOME, or the config
file). Several replicas starting at once are safe: on PostgreSQL and MySQL the migration holds a
database lock (``store/database.py``), so one migrates and the others find the schema current.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from trainguard.cli import common


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("db", help="audit database maintenance (upgrade: apply the schema migrations)",
                            description="Audit database maintenance.")
    actions = parser.add_subparsers(dest="db_action", metavar="ACTION", required=True)
    upgrade = actions.add_parser("upgrade", help="migrate the audit database to this release's schema and exit",
                                 description="Apply the Alembic migrations up to this release's head (a no-op on "
                                 "a current database) and print the revision.")
    common.add_settings_database_arguments(upgrade)
    upgrade.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    url = common.settings_database_url(args, "db upgrade")
    if url is None:
        return 2
    return asyncio.run(_upgrade(url))


async def _upgrade(url: str) -> int:
    from trainguard.store import database

    try:
        store = await database.open_store(url)
    except database.StoreError as exc:
        print(f"trainguard db upgrade: {exc}", file=sys.stderr)
        return 1
    try:
        async with store.sql_engine.connect() as connection:
            revision = await connection.run_sync(database.current_revision)
    finally:
        await store.close()
    print(f"{database.safe_url(url)}: at revision {revision}")
    return 0
