"""The notifier's configuration: a YAML file (``--notify-config FILE``, ``TRAINGUARD_NOTIFY_CONFIG``).

Place: read once at start-up by the settings (``cli/config.py`` checks the file, so a bad one is one
line and exit code 2 before anything opens) and again by ``observe.notify.attach``. Secrets (a webhook
URL carries its token; a PagerDuty routing key) are never written in this file: each target names a
file holding it (a mounted Secret), read when a message is sent, so a rotated Secret needs no restart.
The file must exist and be non-empty at start-up.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Annotated, Any, Final, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from trainguard.model import secrets, yamlload
from trainguard.observe.notify import events as events_mod

PAGERDUTY_EVENTS_URL: Final = "https://events.pagerduty.com/v2/enqueue"
INLINE_SECRETS: Final = {"url": "url_file", "webhook_url": "webhook_url_file", "routing_key": "routing_key_file",
                         "token": "bearer_token_file", "bearer_token": "bearer_token_file"}
"""Keys refused in a target (a secret inline in the file) -> the key to use instead."""


class ConfigError(Exception):
    """A problem with the notify config file, in one line."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class _Target(_Model):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    """Names the target in logs and in the metrics' ``target`` label (so: short, fixed)."""
    events: list[events_mod.Kind] = Field(default_factory=lambda: list(events_mod.Kind))
    """The kinds this target gets (default: every kind)."""
    min_severity: events_mod.Severity = events_mod.Severity.INFO

    @model_validator(mode="before")
    @classmethod
    def _no_inline_secret(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key, instead in INLINE_SECRETS.items():
                if key in data:
                    raise ValueError(f"{key}: a secret is never written in this file; give {instead} (a file "
                                     "holding it, e.g. a mounted Secret)")
        return data

    def secret_files(self) -> list[Path]:
        return []

    def wants(self, kind: events_mod.Kind, severity: events_mod.Severity) -> bool:
        """Whether this target gets a message of ``kind`` (a resolution goes where its opening kind goes)."""
        kind = events_mod.RESOLVES.get(kind, kind)
        if kind in events_mod.RESOLVES.values():
            severity = events_mod.SEVERITY[kind]
        return kind in self.events and severity.rank >= self.min_severity.rank


class WebhookTarget(_Target):
    """A generic JSON webhook: one POST of the message (``observe.notify.payloads.webhook``)."""

    type: Literal["webhook"]
    url_file: Path
    bearer_token_file: Path | None = None

    def secret_files(self) -> list[Path]:
        return [self.url_file, *([self.bearer_token_file] if self.bearer_token_file else [])]


class SlackTarget(_Target):
    """A Slack incoming webhook (``text`` plus blocks)."""

    type: Literal["slack"]
    webhook_url_file: Path

    def secret_files(self) -> list[Path]:
        return [self.webhook_url_file]


class PagerDutyTarget(_Target):
    """PagerDuty Events API v2: ``trigger``, and ``resolve`` for a kind that ends an incident."""

    type: Literal["pagerduty"]
    routing_key_file: Path
    endpoint: str = Field(PAGERDUTY_EVENTS_URL, pattern=r"^https?://")
    """The Events API URL (not a secret; a test or a proxy sets another)."""
    min_severity: events_mod.Severity = events_mod.Severity.ERROR
    """Paging is for what needs a person now: error and critical by default."""

    def secret_files(self) -> list[Path]:
        return [self.routing_key_file]


Target = Annotated[WebhookTarget | SlackTarget | PagerDutyTarget, Field(discriminator="type")]


class Dedup(_Model):
    """``observe.notify.dedup``: how long a first event waits for its cascade, and the quiet window."""

    settle_seconds: float = Field(5.0, ge=0, le=600)
    window_seconds: float = Field(300.0, ge=0, le=86_400)


class Delivery(_Model):
    """Queue and retries: never blocking the loop, never retrying forever."""

    queue_size: int = Field(1000, ge=1, le=1_000_000)
    """Events waiting for the notifier; beyond it new ones are dropped (counted, logged)."""
    outbox_size: int = Field(100, ge=1, le=100_000)
    """Messages waiting per target (a target that is down must not hold back the others)."""
    max_attempts: int = Field(6, ge=1, le=100)
    initial_backoff_seconds: float = Field(1.0, gt=0, le=3600)
    max_backoff_seconds: float = Field(60.0, gt=0, le=86_400)
    timeout_seconds: float = Field(10.0, gt=0, le=600)


class NotifyConfig(_Model):
    """The whole file."""

    source: str = Field(default_factory=socket.gethostname, min_length=1, max_length=255)
    """Where the messages say they come from (PagerDuty's ``payload.source``): e.g. the cluster's name."""
    targets: list[Target] = Field(min_length=1)
    dedup: Dedup = Dedup()
    delivery: Delivery = Delivery()

    @model_validator(mode="after")
    def _unique_names(self) -> NotifyConfig:
        names = [t.name for t in self.targets]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"target names must be unique: {', '.join(twice)}")
        return self


def load(path: Path) -> NotifyConfig:
    """The config in ``path``, checked, its secret files readable and non-empty; ConfigError in one line."""
    try:
        data = yamlload.load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"notify config {path}: cannot read: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"notify config {path}: {str(exc).strip().splitlines()[0]}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"notify config {path}: expected a mapping with 'targets'")
    try:
        config = NotifyConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"notify config {path}: {_one_line(exc)}") from exc
    for target in config.targets:
        for secret in target.secret_files():
            try:
                read_secret(secret)
            except ConfigError as exc:
                raise ConfigError(f"notify config {path}: target {target.name}: {exc}") from exc
    return config


def checked(path: Path) -> Path:
    """``load`` as a settings validator: the path, if its file is good (ValueError in one line)."""
    try:
        load(path)
    except ConfigError as exc:
        raise ValueError(str(exc)) from exc
    return path


ConfigFile = Annotated[Path, AfterValidator(checked)]
"""The settings' type of ``--notify-config``: a path whose file ``load`` accepts."""


def read_secret(path: Path) -> str:
    """The secret in ``path`` (:func:`trainguard.model.secrets.read_secret`), refused as a :class:`ConfigError`."""
    try:
        return secrets.read_secret(path)
    except secrets.SecretFileError as exc:
        raise ConfigError(str(exc)) from exc


def _one_line(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors(include_url=False)[:3]:
        where = ".".join(str(p) for p in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        parts.append(f"{where}: {message}" if where else message)
    more = exc.error_count() - len(parts)
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")
