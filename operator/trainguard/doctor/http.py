"""One time-boxed HTTP GET for the endpoint checks, with errors turned into plain sentences."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import aiohttp

AUTH_STATUSES = frozenset({401, 403})


class Unreachable(Exception):
    """The server could not be reached (refused, DNS, TLS, limit_s); the message says how."""


@dataclasses.dataclass(frozen=True, slots=True)
class Answer:
    status: int
    text: str
    headers: Mapping[str, str]

    def json(self) -> Any:
        try:
            return json.loads(self.text)
        except json.JSONDecodeError:
            return None

    def json_lines(self) -> list[dict[str, Any]]:
        """A JSON-lines body (VictoriaLogs' query answer) as a list of objects; other lines skipped."""
        rows: list[dict[str, Any]] = []
        for line in self.text.splitlines():
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                rows.append(value)
        return rows


def join(base: str, path: str) -> str:
    return base.rstrip("/") + path


async def get(session: aiohttp.ClientSession, url: str, *, params: Mapping[str, str] | None = None,
              limit_s: float = 10.0, headers: Mapping[str, str] | None = None) -> Answer:
    """GET ``url``; any answer (even 500) is returned, only a failure to get one raises Unreachable.

    ``Accept-Encoding: identity``: a compressed answer is held back by some log stores until their
    first row, and these answers are small."""
    try:
        async with session.get(url, params=params, timeout=aiohttp.ClientTimeout(total=limit_s),
                               headers={"Accept-Encoding": "identity", **(headers or {})}) as resp:
            text = await resp.text(errors="replace")
            return Answer(resp.status, text, dict(resp.headers))
    except TimeoutError:
        raise Unreachable(f"no answer from {url} within {limit_s:g} s") from None
    except aiohttp.InvalidURL as exc:
        raise Unreachable(f"invalid URL {exc}") from None
    except aiohttp.ClientConnectorError as exc:
        raise Unreachable(f"cannot connect to {url}: {exc.os_error.strerror or exc}") from None
    except aiohttp.ClientError as exc:
        raise Unreachable(f"{url}: {type(exc).__name__}: {exc}") from None


def describe_status(answer: Answer, what: str) -> str:
    """``HTTP 503 from <what>: <first line of the body>``."""
    body = answer.text.strip().splitlines()[0][:200] if answer.text.strip() else ""
    return f"HTTP {answer.status} from {what}" + (f": {body}" if body else "")
