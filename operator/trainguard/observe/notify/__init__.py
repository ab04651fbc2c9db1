"""Notifications for the events people act on: Slack, PagerDuty (Events API v2) and a JSON webhook.

Place: an observer of the audit store, beside the engine's metrics (docs/notifications.md). The modules,
in the order an event goes through them: ``events`` (which committed audit records are worth a
message), ``dedup`` (a cascade is one message), ``payloads`` (each target's body), ``delivery`` (HTTP
with retries, one bounded outbox per target), ``service`` (the observer, its bounded queue and the
worker task); ``config`` reads the YAML file.

All the wiring is ``attach``: one call where the shell opens the audit store.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from trainguard.observe.notify.config import ConfigError, NotifyConfig, load

if TYPE_CHECKING:  # light to import: the settings (every command) read ``config``; the rest loads in attach
    from prometheus_client import CollectorRegistry

    from trainguard.observe.notify.service import Notifier
    from trainguard.store import audit

__all__ = ["ConfigError", "NotifyConfig", "attach", "load"]


def attach(store: audit.AuditStore, config: Path | NotifyConfig | None,
           registry: CollectorRegistry | None = None) -> Notifier | None:
    """Subscribe a ``Notifier`` for ``config`` (the file of ``--notify-config``, or the loaded config) to
    ``store``'s committed records, its counters on ``registry`` (the one served at /metrics). None when
    no config is given. Raises ConfigError (one line) for a bad file. The notifier's tasks start with
    the first event; ``Notifier.close`` sends what is pending (else it is lost when the loop ends)."""
    if config is None:
        return None
    from trainguard.observe.notify import service

    loaded = load(config) if isinstance(config, Path) else config
    notifier = service.Notifier(loaded, registry)
    store.observers.append(notifier)
    return notifier
