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

from trainguard.cli import config


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("db", help="audit database maintenance (upgrade: apply the schema migrations)",
                            description="Audit database maintenance.")
    actions = parser.add_subparsers(dest="db_action", metavar="ACTION", required=True)
    upgrade = actions.add_parser("upgrade", help="migrate the audit database to this release's schema and exit",
                                 description="Apply the Alembic migrations up to this release's head (a no-op on "
                                 "a current database) and print the revision.")
    upgrade.add_argument("--config", type=str, default=None, metavar="FILE",
                         help="YAML file of settings (as for trainguard run/operator)")
    upgrade.add_argument("--db", dest="db_url", default=None, metavar="URL",
                         help="audit database URL (env TRAINGUARD_DB_URL; default: SQLite in --home)")
    upgrade.add_argument("--db-file", dest="db_url_file", default=None, metavar="FILE",
                         help="file holding the audit database URL (env TRAINGUARD_DB_URL_FILE)")
    upgrade.add_argument("--home", default=None, metavar="DIR", help="state folder (env TRAINGUARD_HOME)")
    upgrade.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    flags = {name: getattr(args, name) for name in ("config", "db_url", "db_url_file", "home")
             if getattr(args, name) is not None}
    try:
        settings = config.load(config.Settings, flags)
    except config.ConfigError as exc:
        print(f"trainguard db upgrade: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(_upgrade(settings.database_url()))


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
