"""Where the embedded audit database lives by default; light, so the CLI can name it in --help
without loading SQLAlchemy and Alembic."""

from __future__ import annotations

import os
import pathlib


def default_db_path() -> pathlib.Path:
    """``$TRAINGUARD_HOME/trainguard.db``, else ``$XDG_STATE_HOME`` or ``~/.local/state``/trainguard/trainguard.db."""
    home = os.environ.get("TRAINGUARD_HOME")
    if home:
        return pathlib.Path(home).expanduser() / "trainguard.db"
    state = os.environ.get("XDG_STATE_HOME") or str(pathlib.Path.home() / ".local" / "state")
    return pathlib.Path(state).expanduser() / "trainguard" / "trainguard.db"


DEFAULT_DB_URL = f"sqlite+aiosqlite:///{default_db_path()}"
"""The database ``trainguard run``, ``operator`` and ``audit`` use when ``--db`` is not given."""
