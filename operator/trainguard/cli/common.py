"""What several sub-commands share: loading the pattern catalog with operator files, and reporting problems.

Every command that takes ``--patterns-file`` (detect, scan, patterns, run, operator) loads the
catalog here, so a missing file, a YAML syntax error or an invalid pattern is one line on stderr
naming the file and the field (``trainguard detect: ops.yaml: pattern x: category: Field required``)
and exit code 2, as a policy error is — never a traceback, never a different wording per command.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainguard.detect import catalog as catalog_mod

USAGE_ERROR = 2
"""Exit code of a problem with the command line or a file it names (policy, patterns): nothing ran."""


def error(command: str, message: str) -> None:
    """One line on stderr, prefixed with the command (``trainguard scan: ...``)."""
    print(f"trainguard {command}: {' '.join(message.split())}", file=sys.stderr)


def load_catalog(command: str, files: Sequence[Path]) -> catalog_mod.Catalog | None:
    """The built-in catalog extended by ``files``; on a problem, one line on stderr and None."""
    from trainguard.detect import catalog as catalog_mod  # here: keeps `trainguard --help` light

    try:
        return catalog_mod.load_catalog(extra_files=files)
    except catalog_mod.CatalogError as exc:
        error(command, str(exc))
        return None


def database_url(command: str, given: str | None) -> str | None:
    """The audit database a read-only command (``audit``, ``patterns fired``) opens: ``--db`` when
    given, else the same settings ``trainguard run`` resolves (TRAINGUARD_DB_URL,
    TRAINGUARD_DB_URL_FILE, TRAINGUARD_HOME, a TRAINGUARD_CONFIG file), so reading the log of an
    installation needs no more flags than running it did. On a problem: one line, None."""
    if given is not None:
        return given
    from trainguard.cli import config  # here: keeps `trainguard --help` light

    try:
        return config.load(config.Settings, {}).database_url()
    except config.ConfigError as exc:
        error(command, str(exc))
        return None
