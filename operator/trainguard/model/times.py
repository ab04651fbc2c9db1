"""Time conversions: epoch seconds, aware datetimes, ISO 8601 / RFC 3339 text and nanoseconds.

Place: ``model``, below every stage and adapter, so each module that turns a scheduler's, a log
store's or the database's time into the engine's clock (epoch seconds, UTC) uses the same rule
instead of its own copy. The engine's clock is epoch seconds (``model.clock``); the database keeps
aware UTC datetimes; Kubernetes speaks RFC 3339 text; Loki and VictoriaLogs speak nanoseconds.
"""

from __future__ import annotations

import datetime
from typing import Final

NS: Final = 1_000_000_000
"""Nanoseconds per second (Loki's and VictoriaLogs' unit)."""


def to_datetime(epoch: float) -> datetime.datetime:
    """Epoch seconds as an aware UTC datetime."""
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC)


def to_epoch(when: datetime.datetime) -> float:
    """An aware datetime as epoch seconds (a naive one is read as local time, as ``timestamp`` does)."""
    return when.timestamp()


def iso_utc(when: datetime.datetime) -> str:
    """``2026-11-29T16:03:04.123456+00:00``: always UTC, always six fraction digits."""
    return when.astimezone(datetime.UTC).isoformat(timespec="microseconds")


def parse_iso(text: str) -> datetime.datetime:
    """ISO 8601 text as a datetime, accepting the ``Z`` suffix for UTC (``2026-11-29T16:03:04Z``).
    Raises ``ValueError`` when the text is not a timestamp; the zone stays as written (a text
    without one gives a naive datetime)."""
    return datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))


def rfc3339_seconds(epoch: float) -> str:
    """``2026-11-29T16:03:04Z``: UTC, whole seconds (Kubernetes ``Time`` fields, ``date -u`` style)."""
    return to_datetime(epoch).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_micro(epoch: float) -> str:
    """``2026-11-29T16:03:04.123456Z``: UTC with microseconds (Kubernetes ``MicroTime`` fields)."""
    return to_datetime(epoch).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def ns_of(epoch: float) -> int:
    """Epoch seconds as integer nanoseconds (truncated toward zero)."""
    return int(epoch * NS)


def seconds_of(ns: int) -> float:
    """Integer nanoseconds as epoch seconds."""
    return ns / NS
