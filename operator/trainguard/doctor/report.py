"""The result of one doctor check and the two ways it is printed (table and JSON)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import textwrap
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

Status = Literal["ok", "warn", "fail"]

logger = logging.getLogger("trainguard.doctor")


@dataclasses.dataclass(frozen=True, slots=True)
class Check:
    """One finding. ``fix`` says what to change when the status is not ok; ``details`` carries data
    worth showing as it is (a sample stream, metrics per node) and goes into the JSON only."""

    name: str
    status: Status
    message: str
    fix: str | None = None
    details: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        # Servers answer with multi-line errors; one line per finding keeps the table readable.
        lines = [line.strip() for line in self.message.splitlines() if line.strip()]
        object.__setattr__(self, "message", "; ".join(lines))

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "status": self.status, "message": self.message}
        if self.fix:
            out["fix"] = self.fix
        if self.details is not None:
            out["details"] = self.details
        return out


def ok(name: str, message: str, details: dict[str, Any] | None = None) -> Check:
    return Check(name, "ok", message, None, details)


def warn(name: str, message: str, fix: str | None = None, details: dict[str, Any] | None = None) -> Check:
    return Check(name, "warn", message, fix, details)


def fail(name: str, message: str, fix: str | None = None, details: dict[str, Any] | None = None) -> Check:
    return Check(name, "fail", message, fix, details)


async def guarded(name: str, check: Callable[[], Awaitable[list[Check]]], limit_s: float) -> list[Check]:
    """``check()`` within ``limit_s`` seconds. A check that does not finish in time, or raises
    something its author did not expect, is one failed check named ``name``: doctor must report on
    a broken installation, so it never hangs and never prints a traceback."""
    try:
        async with asyncio.timeout(limit_s):
            return await check()
    except TimeoutError:
        return [fail(name, f"no answer within {limit_s:g} s", "check that the server is up and reachable from "
                     "this host, or raise --check-timeout")]
    except Exception as exc:
        logger.debug("check %s raised", name, exc_info=True)
        return [fail(name, f"{type(exc).__name__}: {exc}")]


def failed(checks: Sequence[Check]) -> bool:
    return any(c.status == "fail" for c in checks)


def to_json(checks: Sequence[Check]) -> str:
    """The contract: ONE JSON object ``{"checks": [{"name", "status", "message", ...}]}``."""
    return json.dumps({"checks": [c.as_json() for c in checks]}, default=str)


_MARK = {"ok": "ok", "warn": "WARN", "fail": "FAIL"}


def to_table(checks: Sequence[Check], width: int = 100) -> str:
    """A readable table: status, check name, message; the fix on the line below a warn or fail."""
    name_w = max([len("CHECK"), *(len(c.name) for c in checks)])
    lines = [f"{'STATUS':<6}  {'CHECK':<{name_w}}  MESSAGE"]
    indent = " " * (6 + 2 + name_w + 2)
    text_w = max(40, width - len(indent))
    for c in checks:
        msg = textwrap.wrap(c.message, text_w) or [""]
        lines.append(f"{_MARK[c.status]:<6}  {c.name:<{name_w}}  {msg[0]}")
        lines.extend(indent + more for more in msg[1:])
        if c.fix and c.status != "ok":
            fix = textwrap.wrap("fix: " + c.fix, text_w)
            lines.extend(indent + part for part in fix)
    counts = {s: sum(1 for c in checks if c.status == s) for s in ("ok", "warn", "fail")}
    lines.append("")
    lines.append(f"{counts['ok']} ok, {counts['warn']} warn, {counts['fail']} fail")
    return "\n".join(lines)
