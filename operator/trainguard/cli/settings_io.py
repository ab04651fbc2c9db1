"""The settings of ``cli/config.py`` on the way in and out: the YAML config file, the flags generated from
the fields, loading with one-line errors, ``--print-config`` and what ``run`` and ``operator`` do first.

``config.py`` says WHAT can be set (one pydantic field per setting, with its flag name, environment
variables and help); this module is HOW it is read and shown, so that neither grows past a screenful
of concerns. Precedence, secrets from files and redaction are described in ``config.py``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import SecretStr, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from trainguard.cli import logsetup
from trainguard.cli.config import (
    ENV_PREFIX,
    READ_ELSEWHERE,
    REPLACED_ENV,
    ConfigError,
    OperatorSettings,
    Settings,
    env_names,
    flag_of,
)
from trainguard.model import yamlload

logger = logging.getLogger("trainguard.config")


class ConfigFileSource(PydanticBaseSettingsSource):
    """The YAML config file: a mapping of setting names (``-`` or ``_``) to values."""

    def __init__(self, settings_cls: type[BaseSettings], path: Path | None) -> None:
        super().__init__(settings_cls)
        self.path = path
        self.values: dict[str, Any] = {}
        if path is None:
            return
        try:
            data = yamlload.load(path.read_text(encoding="utf-8"))
        except yamlload.DuplicateKeyError as exc:
            raise ConfigError(f"config file {path}: {exc}") from exc
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"config file {path}: {_first_line(exc)}") from exc
        if data is None:
            return
        if not isinstance(data, dict):
            raise ConfigError(f"config file {path}: expected a mapping of setting names to values")
        known = settings_cls.model_fields
        anywhere = _every_setting_name()
        seen: dict[str, Any] = {}
        for key, value in data.items():
            name = str(key).replace("-", "_")
            if name not in anywhere or name == "config":
                raise ConfigError(f"config file {path}: unknown setting {key!r}")
            if name in seen:  # `db-url` and `db_url`: one setting given twice
                raise ConfigError(f"config file {path}: setting {name!r} given twice ({seen[name]!r} and {key!r})")
            seen[name] = key
            if name in known:  # one file serves every command: another command's settings are not ours to read
                self.values[name] = value

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self.values.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self.values)



# ---------------------------------------------------------------------- flags


def add_arguments(parser: argparse.ArgumentParser, cls: type[Settings]) -> None:
    """One flag per setting of ``cls``. Every default is None, so that a flag not given leaves the
    setting to the environment, the config file and the default, in that order."""
    for name, info in cls.model_fields.items():
        if cls.FLAGS is not None and name not in cls.FLAGS:
            continue
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        flags = [flag_of(cls, name)]
        if extra.get("short"):
            flags.insert(0, str(extra["short"]))
        default = info.get_default(call_default_factory=True)
        shown = "" if default in (None, [], False) else f"; default: {_shown(default)}"
        help_text = f"{info.description or name.replace('_', ' ')} (env {' or '.join(env_names(cls, name))}{shown})"
        help_text = help_text.replace("%", "%%")
        kwargs: dict[str, Any] = {"dest": name, "default": None, "help": help_text}
        annotation = info.annotation
        if annotation is bool:
            parser.add_argument(*flags, action="store_true", **kwargs)
            continue
        if extra.get("metavar"):
            kwargs["metavar"] = extra["metavar"]
        if typing.get_origin(annotation) is list:
            item = typing.get_args(annotation)[0]
            parser.add_argument(*flags, action="append", type=item if item is Path else str, **kwargs)
            continue
        choices = _literal_choices(annotation)
        if choices:
            parser.add_argument(*flags, choices=choices, **kwargs)
        elif _base_type(annotation) is float:
            parser.add_argument(*flags, type=float, **kwargs)
        else:
            parser.add_argument(*flags, **kwargs)


def flags_of(args: argparse.Namespace, cls: type[Settings]) -> dict[str, Any]:
    """The settings given as flags (the ones whose value is not None)."""
    return {name: value for name, value in vars(args).items() if name in cls.model_fields and value is not None}


S = TypeVar("S", bound=Settings)


def load(cls: type[S], flags: Mapping[str, Any]) -> S:
    """The settings of ``cls`` from ``flags`` (see ``flags_of``), the environment and the config
    file. ConfigError with one line when something is wrong."""
    for old, new in REPLACED_ENV.items():
        if old in os.environ:
            raise ConfigError(f"{old} is no longer read: the cluster-wide Action switch is {new} (or --mode action)")
    try:
        settings = cls(**dict(flags))
        settings.database_url()
        settings.slurm_token()
    except ValidationError as exc:
        raise ConfigError(_format(exc, cls)) from exc
    unused = unused_environment(cls)
    if unused:
        logger.warning("environment variables nothing reads (typo?): %s", ", ".join(unused))
    return settings


def unused_environment(cls: type[Settings]) -> list[str]:
    """``TRAINGUARD_*`` variables of this process that no setting reads. doctor reads the operator's
    too (where it serves: ``k8s.kube_probe``), as the chart's ``helm test`` pod passes them."""
    classes: tuple[type[Settings], ...] = (cls, OperatorSettings) if cls.COMMAND == "doctor" else (cls,)
    known = {env for c in classes for name in c.model_fields for env in env_names(c, name)}
    return sorted(name for name in os.environ if name.startswith(ENV_PREFIX) and name not in known)


def describe(settings: Settings, flags: Mapping[str, Any]) -> dict[str, Any]:
    """The effective configuration with where each value came from; secrets redacted."""
    cls = type(settings)
    file_values: dict[str, Any] = {}
    if settings.config is not None:
        file_values = ConfigFileSource(cls, settings.config).values
    items: dict[str, Any] = {}
    read: dict[str, str] = {}
    for name in cls.model_fields:
        envs = [env for env in env_names(cls, name) if env in os.environ]
        for env in envs:
            read[env] = f"setting {name}"
        if name in flags:
            source = f"flag {flag_of(cls, name)}"
        elif envs:
            source = f"env {envs[0]}"
        elif name in file_values:
            source = f"file {settings.config}"
        else:
            source = "default"
        items[name] = {"value": _redacted(name, getattr(settings, name)), "source": source}
    for env, what in READ_ELSEWHERE.items():
        if env in os.environ:
            read[env] = what
    return {"command": cls.COMMAND, "settings": items, "effective": settings.effective(),
            "environment": {"read": dict(sorted(read.items())), "unused": unused_environment(cls)}}


def print_config(settings: Settings, flags: Mapping[str, Any]) -> int:
    """``--print-config``: the configuration on stdout and nothing else, not even INFO lines on stderr
    (describing it imports the store, whose migration tool logs as it loads)."""
    logging.getLogger().setLevel(max(logging.WARNING, logging.getLogger().level))
    print(json.dumps(describe(settings, flags), indent=2, sort_keys=False, default=str))
    return 0


def warn_secret_flags(settings: Settings, flags: Mapping[str, Any], prog: str) -> None:
    """A secret given on the command line works, with a warning: every user of the host can read it."""
    if "slurm_jwt" in flags:
        logger.warning("%s: --jwt puts the token on the command line, where ps shows it to every user of this "
                       "host; use $SLURM_JWT or --jwt-file FILE", prog)
    if "db_url" in flags and settings.db_url is not None and _has_password(settings.db_url.get_secret_value()):
        logger.warning("%s: the --db URL holds a password, which ps shows to every user of this host; use "
                       "TRAINGUARD_DB_URL or --db-file FILE", prog)


def start(args: argparse.Namespace, cls: type[S], prog: str) -> S | int:
    """What ``run`` and ``operator`` do first: log to stderr, load the settings from ``args`` and
    the environment, and answer ``--print-config``. The settings, or the exit code to return now
    (2 with one line on stderr for a configuration error, 0 after ``--print-config``)."""
    flags = flags_of(args, cls)
    logsetup.configure(logging.INFO, _early_log_format(flags))
    try:
        settings = load(cls, flags)
    except ConfigError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    logsetup.configure(settings.log_level, settings.log_format)
    if args.print_config:
        return print_config(settings, flags)
    warn_secret_flags(settings, flags, prog)
    return settings


class ReplacedFlag(argparse.Action):
    """A removed flag: a clear error naming its replacement, instead of argparse's 'unrecognized'."""

    def __init__(self, option_strings: list[str], dest: str, replacement: str = "", **kwargs: Any) -> None:
        self.replacement = replacement
        kwargs.setdefault("help", f"removed: use {replacement}")
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        parser.error(f"{option_string} was replaced by {self.replacement}")


# ---------------------------------------------------------------------- helpers


def _early_log_format(flags: Mapping[str, Any]) -> str:
    """The log format for the lines logged while the settings load (flag, else environment): JSON
    consumers must not get a text line first. A bad value is reported by the settings, in text."""
    value = str(flags.get("log_format") or os.environ.get(f"{ENV_PREFIX}LOG_FORMAT", "text")).strip().lower()
    return value if value in logsetup.FORMATS else "text"


def _every_setting_name() -> set[str]:
    """The settings of every command (``Settings`` and its subclasses): the keys a config file may hold,
    since one file serves ``run``, ``operator``, ``doctor`` and ``scorecard`` alike."""
    names: set[str] = set()
    pending: list[type[Settings]] = [Settings]
    while pending:
        cls = pending.pop()
        names.update(cls.model_fields)
        pending.extend(cls.__subclasses__())
    return names


def _redacted(name: str, value: Any) -> Any:
    if isinstance(value, SecretStr):
        if name == "db_url":
            from trainguard.store import database

            return database.safe_url(value.get_secret_value())
        return "**********"
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, list):
        return [str(v) for v in value]
    return value


def _has_password(url: str) -> bool:
    head = url.split("://", 1)[-1].split("/", 1)[0]
    return "@" in head and ":" in head.split("@", 1)[0]


def _format(exc: ValidationError, cls: type[Settings]) -> str:
    parts = []
    for error in exc.errors(include_url=False):
        loc = [str(part) for part in error["loc"]]
        name = loc[0] if loc else ""
        if name.upper().startswith(ENV_PREFIX) or name.isupper():  # reported under an alias
            name = next((n for n in cls.model_fields if str(name) in env_names(cls, n)), name.lower())
        if name in cls.model_fields:
            where = f"{flag_of(cls, name)} / {' / '.join(env_names(cls, name))}"
            parts.append(f"{where}: {error['msg']}")
        else:
            parts.append(str(error["msg"]).removeprefix("Value error, "))
    return "; ".join(parts)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _literal_choices(annotation: Any) -> list[str] | None:
    if typing.get_origin(annotation) is Literal:
        return [str(arg) for arg in typing.get_args(annotation)]
    return None


def _base_type(annotation: Any) -> Any:
    """``X | None`` -> ``X``."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else annotation
    return annotation


def _shown(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)
