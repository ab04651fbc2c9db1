"""Duration strings of RecoveryPolicy fields (``hangTimeout: 30m``), parsed strictly into float seconds.

Place in the loop: used by ``policy.model`` (the schema) and ``policy.overrides`` (the
opt-in comment), so a policy file, a CRD and a ``--comment`` accept exactly the same
spelling. One representation only: a string of ``<number><unit>`` parts with units
``d``, ``h``, ``m``, ``s``, ``ms`` in decreasing order, each at most once
(``90s``, ``1h30m``, ``1.5h``, ``500ms``). A bare number is rejected, because ``30``
could mean seconds or minutes and a wrong guess turns a hang timeout into a restart storm.
Internally every duration is float seconds; it is written back in the same canonical form.
"""

from __future__ import annotations

import math
import re

PATTERN = r"^([0-9]+(\.[0-9]+)?(d|h|ms|m|s))+$"
"""The JSON-schema / CRD pattern of a duration string (the parser below is stricter: unit order)."""

MAX_SECONDS = 366 * 86400.0
"""Upper bound of any duration (a year): larger values are typos, and they overflow deadlines."""

_UNITS: dict[str, float] = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_ORDER = ("d", "h", "m", "s", "ms")
_PART = re.compile(r"([0-9]{1,12}(?:\.[0-9]{1,9})?)(d|h|ms|m|s)")
_MAX_TEXT = 64


def parse(text: object) -> float:
    """Seconds in ``text``; ValueError with a message a job owner can act on."""
    if isinstance(text, bool) or not isinstance(text, str):
        raise ValueError(f"a duration must be a string such as '90s', '30m' or '1h30m', not {text!r}")
    if not text or len(text) > _MAX_TEXT:
        raise ValueError("a duration must be 1 to 64 characters, e.g. '90s', '30m', '1h30m'")
    position = 0
    seconds = 0.0
    last_rank = -1
    while position < len(text):
        match = _PART.match(text, position)
        if match is None:
            raise ValueError(
                f"invalid duration {text[:_MAX_TEXT]!r}: use <number><unit> parts with units d, h, m, s, ms "
                "(e.g. '90s', '30m', '1h30m'); a bare number is not accepted"
            )
        rank = _ORDER.index(match.group(2))
        if rank <= last_rank:
            raise ValueError(f"invalid duration {text!r}: units must appear once each, largest first (e.g. '1h30m')")
        last_rank = rank
        seconds += float(match.group(1)) * _UNITS[match.group(2)]
        position = match.end()
    if not math.isfinite(seconds) or seconds > MAX_SECONDS:
        raise ValueError(f"duration {text!r} is longer than a year")
    return seconds


def format_seconds(seconds: float) -> str:
    """The canonical string for ``seconds``: ``1800.0 -> '30m'``, ``5400.0 -> '1h30m'``, ``0.5 -> '500ms'``."""
    if seconds == 0:
        return "0s"
    millis = round(seconds * 1000)
    if not math.isclose(millis / 1000, seconds, abs_tol=1e-9):
        return f"{seconds:.9f}".rstrip("0").rstrip(".") + "s"
    parts: list[str] = []
    for unit in _ORDER:
        size = round(_UNITS[unit] * 1000)
        count, millis = divmod(millis, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
