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


def as_utc(when: datetime.datetime) -> datetime.datetime:
    """``when`` with a zone: a naive datetime is read as UTC (the API's and the CLI's rule for times
    written without an offset), an aware one is kept as it is."""
    return when if when.tzinfo is not None else when.replace(tzinfo=datetime.UTC)


def iso_utc(when: datetime.datetime) -> str:
    """``2026-11-29T16:03:04.123456+00:00``: always UTC, always six fraction digits."""
    return when.astimezone(datetime.UTC).isoformat(timespec="microseconds")


def parse_iso(text: str) -> datetime.datetime:
    """ISO 8601 text as a datetime, accepting the ``Z`` suffix for UTC (``2026-11-29T16:03:04Z``).
    Raises ``ValueError`` when the text is not a timestamp; the zone stays as written (a text
    without one gives a naive datetime)."""
    return datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))


def rfc3339(when: datetime.datetime, *, micro: bool = False) -> str:
    """``2026-11-29T16:03:04Z`` (Kubernetes ``Time``), or with ``micro`` ``2026-11-29T16:03:04.123456Z``
    (``MicroTime``): UTC, with a ``Z``. A naive ``when`` is read as local time (``astimezone``)."""
    return when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339_ns(text: str) -> int:
    """RFC 3339 with any number of fraction digits (``Z``, an offset, or none: UTC) -> ns since the
    epoch, exactly: the fraction is kept to the nanosecond, not rounded through a float (container
    runtimes and log stores write nine digits, and lines a nanosecond apart must stay apart).
    Raises ``ValueError`` when ``text`` is not such a time."""
    base, frac = text.strip(), ""
    if base.endswith("Z"):
        base = base[:-1] + "+00:00"
    if "." in base:
        head, rest = base.split(".", 1)
        digits = len(rest) - len(rest.lstrip("0123456789"))
        frac, base = rest[:digits], head + rest[digits:]
    seconds = datetime.datetime.fromisoformat(base)
    if seconds.tzinfo is None:
        seconds = seconds.replace(tzinfo=datetime.UTC)
    return int(seconds.timestamp()) * NS + int((frac + "000000000")[:9])


def rfc3339_ns(ns: int) -> str:
    """ns since the epoch -> ``2026-11-29T16:03:04.123456789Z`` (UTC, nine fraction digits)."""
    seconds, rest = divmod(ns, NS)
    return f"{to_datetime(seconds).strftime('%Y-%m-%dT%H:%M:%S')}.{rest:09d}Z"
