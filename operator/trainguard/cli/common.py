"""What several sub-commands share: loading the pattern catalog with operator files, reporting problems,
and the arguments of the read-only commands over the audit database (``--db``, times, counts).

Every command that takes ``--patterns-file`` (detect, scan, patterns, run, operator) loads the
catalog here, so a missing file, a YAML syntax error or an invalid pattern is one line on stderr
naming the file and the field (``trainguard detect: ops.yaml: pattern x: category: Field required``)
and exit code 2, as a policy error is — never a traceback, never a different wording per command.
"""

from __future__ import annotations

import argparse
import datetime
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainguard import settings as settings_mod
from trainguard.model import times
from trainguard.store import location

if TYPE_CHECKING:
    from trainguard.cli import config
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


def engine_settings(cfg: config.Settings) -> settings_mod.EngineSettings:
    """The engine's settings from the command's settings: the one mapping, used by ``run`` and ``operator``
    alike, so a setting both accept cannot reach one engine and be dropped by the other (the journal's
    retention and cap once were)."""
    return settings_mod.EngineSettings(discovery_interval_s=cfg.poll, allow_action=cfg.mode == "action",
                                       journal_retention_s=cfg.journal_retention_days * 86400.0,
                                       journal_max_bytes=cfg.journal_max_bytes,
                                       max_actions_per_hour=cfg.max_actions_per_hour,
                                       max_nodes_out=cfg.max_nodes_out,
                                       max_nodes_out_share=cfg.max_nodes_out_share)


FORMAT_ALIASES = {"table": "text"}
"""Other names of an output format: every command prints ``text`` for people (``table`` was the name on
some commands and is still accepted everywhere) and ``json`` for scripts."""


def output_format(text: str) -> str:
    """``--format`` value, its alias resolved (``table`` -> ``text``); argparse then checks the choices."""
    value = text.strip().lower()
    return FORMAT_ALIASES.get(value, value)


def add_format_argument(parser: argparse.ArgumentParser, *, json_help: str, text_help: str) -> None:
    """``--format text|json`` as every command takes it (``table`` accepted for ``text``; default text)."""
    parser.add_argument("--format", type=output_format, choices=("text", "json"), default="text",
                        help=f"json: {json_help}; text (or table): {text_help} (default)")


def finite_float(text: str) -> float:
    """A number that must be finite: ``inf`` or ``nan`` would make a limit or an interval meaningless."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def seconds(text: str) -> float:
    """A duration in seconds: finite and >= 0."""
    try:
        value = finite_float(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text!r}")
    return value


def database_url(command: str, given: str | None) -> str | None:
    """The audit database a read-only command (``audit``, ``patterns fired``) opens: ``--db`` when
    given, else the same settings ``trainguard run`` resolves (TRAINGUARD_DB_URL,
    TRAINGUARD_DB_URL_FILE, TRAINGUARD_HOME, a TRAINGUARD_CONFIG file), so reading the log of an
    installation needs no more flags than running it did. On a problem: one line, None."""
    if given is not None:
        return given
    from trainguard.cli import config, settings_io  # here: keeps `trainguard --help` light

    try:
        return settings_io.load(config.Settings, {}).database_url()
    except config.ConfigError as exc:
        error(command, str(exc))
        return None


def add_db_argument(parser: argparse.ArgumentParser) -> None:
    """``--db URL`` of a read-only command over the audit database (resolved by ``database_url``)."""
    parser.add_argument("--db", metavar="URL",
                        help="database URL (default: as `trainguard run` resolves it: TRAINGUARD_DB_URL, "
                        f"TRAINGUARD_DB_URL_FILE, TRAINGUARD_HOME, else {location.DEFAULT_DB_URL})")


def positive(text: str) -> int:
    """An argument that must be a whole number >= 1 (a count or a limit)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def timestamp(text: str) -> datetime.datetime:
    """An ISO 8601 argument as an aware datetime (no offset means UTC, as the API's times)."""
    try:
        when = times.parse_iso(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an ISO 8601 time such as 2026-11-29T16:00:00Z, got {text!r}") from None
    return when if when.tzinfo is not None else when.replace(tzinfo=datetime.UTC)


def who(by: str | None) -> str:
    """Who a person's decision is recorded as: ``--by NAME`` when given, else USER@HOST of this shell."""
    import getpass
    import socket

    if by:
        return by
    try:
        user = getpass.getuser()
    except Exception:  # no name for this uid (a container): the uid says it
        user = "uid-unknown"
    return f"{user}@{socket.gethostname()}"


SETTINGS_DATABASE_FLAGS = ("config", "db_url", "db_url_file", "home")
"""The flags of ``add_settings_database_arguments``, as the names ``cli.config.Settings`` knows them."""


def add_settings_database_arguments(parser: argparse.ArgumentParser) -> None:
    """``--config``, ``--db``, ``--db-file``, ``--home``: the audit database found exactly as ``run`` and
    ``operator`` find it (flag, then TRAINGUARD_DB_URL / TRAINGUARD_DB_URL_FILE / TRAINGUARD_HOME, then the
    config file), for every command over the audit database (``audit``, ``goodput``, ``backtest``,
    ``patterns fired``, ``db upgrade``, ``actions``; ``scorecard`` through its settings)."""
    parser.add_argument("--config", default=None, metavar="FILE",
                        help="YAML file of settings (as for trainguard run/operator)")
    parser.add_argument("--db", dest="db_url", default=None, metavar="URL",
                        help="audit database URL (env TRAINGUARD_DB_URL; default: SQLite in --home)")
    parser.add_argument("--db-file", dest="db_url_file", default=None, metavar="FILE",
                        help="file holding the audit database URL (env TRAINGUARD_DB_URL_FILE)")
    parser.add_argument("--home", default=None, metavar="DIR", help="state folder (env TRAINGUARD_HOME)")


def settings_database_url(args: argparse.Namespace, command: str) -> str | None:
    """The database URL those arguments name, or None after a one-line error on stderr (exit code 2)."""
    from trainguard.cli import config, settings_io  # here: the settings model is heavy for the light commands

    flags = {name: getattr(args, name) for name in SETTINGS_DATABASE_FLAGS if getattr(args, name) is not None}
    if set(flags) == {"db_url"}:  # the URL itself, given on the command line: nothing else to consult
        return str(flags["db_url"])
    try:
        return settings_io.load(config.Settings, flags).database_url()
    except config.ConfigError as exc:
        error(command, str(exc))
        return None


class DeprecatedAlias(argparse.Action):
    """An old spelling that still works for now, with one line on stderr naming the new one: scripts keep
    running while they are moved (``scorecard --policy NAME`` -> ``--policy-name NAME``)."""

    def __init__(self, option_strings: list[str], dest: str, replacement: str = "", why: str = "",
                 **kwargs: Any) -> None:
        self.replacement = replacement
        self.why = why
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        command = parser.prog.removeprefix("trainguard ")
        error(command, f"warning: {option_string} is deprecated here{self.why}: use {self.replacement}")
        setattr(namespace, self.dest, values)
