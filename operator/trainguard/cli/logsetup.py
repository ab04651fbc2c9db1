"""Where the commands' log lines go and how they look: ``--log-format text|json`` (``TRAINGUARD_LOG_FORMAT``).

Every command logs to stderr (stdout is the command's output: JSON rows, a table, ``--print-config``).
``text`` is a line for a person: ``2026-12-03 14:00:00,123 INFO    trainguard.engine: ...``. ``json`` is
one JSON object per line for a log shipper (Loki, VictoriaLogs, Elasticsearch) with ``time`` (UTC ISO
8601 with microseconds, as ``trainguard audit``), ``level``, ``logger``, ``message``, ``exception`` (the
traceback, when there is one) and, when the line is about one recovery, ``workload``, ``attempt`` and
``generation``, so that a search by workload finds every line of its recovery without parsing prose.

Those three come, first found first, from:

1. the record's own attributes (``logger.info(..., extra={"workload": w, "attempt": a})``): the seam
   for code that wants to be explicit;
2. the asyncio task the line is logged from: the engine runs each recovery as a task named
   ``recover:WORKLOAD:ATTEMPT:GENERATION`` (``takeover:``/``release:`` WORKLOAD:GENERATION,
   ``await-metrics:`` WORKLOAD:ATTEMPT), so every line of the executor, its steps and the watchdog
   within it carries them;
3. the house convention of the engine's and executor's messages, which start with the workload and
   ``attempt %d`` and/or ``generation %d`` as format arguments (``"%s attempt %d generation %d: ..."``).

Alembic logs one INFO line per plugin when it is imported: noise on every start (and the only thing on
stderr of ``--print-config``), so its plugin logger is kept at WARNING; migrations are still logged.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
from typing import Any, Final, Literal

from trainguard.model import times

LogFormat = Literal["text", "json"]
FORMATS: Final = ("text", "json")
TEXT_FORMAT: Final = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
QUIET_LOGGERS: Final = ("alembic.runtime.plugins",)
"""Loggers whose INFO lines say nothing to an operator (alembic's plugin set-up at import)."""

CONTEXT_FIELDS: Final = ("workload", "attempt", "generation")

_TASK_SHAPES: Final = {
    "recover": ("attempt", "generation"),
    "takeover": ("generation",),
    "release": ("generation",),
    "await-metrics": ("attempt",),
}
"""The engine's per-recovery task names (``engine.recovery.RecoveryRunner.start``): PREFIX:WORKLOAD:<these integers>."""

_MESSAGE_SHAPES: Final = (
    (re.compile(r"^%s attempt %d generation %d\b"), ("workload", "attempt", "generation")),
    (re.compile(r"^%s attempt %d\b"), ("workload", "attempt")),
    (re.compile(r"^%s generation %d\b"), ("workload", "generation")),
)


def configure(level: str | int = logging.INFO, fmt: str = "text") -> None:
    """Log to stderr at ``level`` in ``fmt`` (``text`` or ``json``).

    Called again once the settings are read, it replaces its own handler (a line is never printed
    twice). Handlers someone else put on the root logger first (an embedding program, pytest) are left
    alone and ours is not added, as ``logging.basicConfig`` does; only the level is set."""
    root = logging.getLogger()
    ours = [h for h in root.handlers if isinstance(h, _StderrHandler)]
    if ours or not root.handlers:
        for old in ours:
            root.removeHandler(old)
        handler = _StderrHandler()
        handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
        root.addHandler(handler)
    root.setLevel(level)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a line is logged, not when the handler was made."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        """``StreamHandler`` sets it; the stream is always the current ``sys.stderr``."""


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (the module docstring lists the fields)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": times.iso_utc(times.to_datetime(record.created)),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        out.update(context_of(record))
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exception"] = record.exc_text
        return json.dumps(out, ensure_ascii=False, default=str)


def context_of(record: logging.LogRecord) -> dict[str, Any]:
    """``workload``, ``attempt``, ``generation`` of the recovery ``record`` is about, those known."""
    found: dict[str, Any] = {}
    for name in CONTEXT_FIELDS:
        value = getattr(record, name, None)
        if value is not None:
            found[name] = value
    for source in (_from_task(), _from_message(record)):
        for name, value in source.items():
            found.setdefault(name, value)
    return found


def _from_task() -> dict[str, Any]:
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running event loop in this thread
        return {}
    if task is None:
        return {}
    prefix, _, rest = task.get_name().partition(":")
    shape = _TASK_SHAPES.get(prefix)
    if shape is None or not rest:
        return {}
    parts = rest.rsplit(":", len(shape))  # a workload id may hold ':'; the numbers are last
    if len(parts) != len(shape) + 1 or not all(p.isdigit() for p in parts[1:]):
        return {}
    return {"workload": parts[0], **{name: int(p) for name, p in zip(shape, parts[1:], strict=True)}}


def _from_message(record: logging.LogRecord) -> dict[str, Any]:
    if not isinstance(record.msg, str) or not isinstance(record.args, tuple):
        return {}
    for pattern, names in _MESSAGE_SHAPES:
        if pattern.match(record.msg) and len(record.args) >= len(names):
            return {name: record.args[i] for i, name in enumerate(names)}
    return {}
