"""What every ``/api/v1`` route module shares: the API's state, its error, request parsing, answers.

Place: imported by the route modules (``workloads``, ``audit_search``, ``policies``, ``nodes``,
``reports``, ``service``, ``events``, ``pause``, ``breaker``) and by ``http.api``, which mounts them.
Kept apart so that a route module needs nothing from ``http.api`` and no module imports the one
that mounts it.

A handler raises ``ApiError`` for a failure it knows (bad input, a missing store or engine, an
unknown name); the middleware of ``http.api`` turns it into ``models.Error`` JSON with its status.
Query parameters are strict: unknown ones, repeated ones, malformed cursors and out-of-range values
are a 400 with one sentence, so a script learns about a typo instead of reading an unfiltered list.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol

from aiohttp import web
from pydantic import BaseModel, ValidationError

from trainguard import health as health_mod
from trainguard.http import models, sse
from trainguard.model import times
from trainguard.store import audit, queries

if TYPE_CHECKING:
    from trainguard import engine as engine_mod

PREFIX: Final = "/api/v1"
DEFAULT_LIMIT: Final = 50
MAX_LIMIT: Final = 500


class Backend(Protocol):
    """What the API reads from its shell: the open store and the running engine (either may be None:
    the store before start-up finished, the engine on a replica without the Lease)."""

    @property
    def store(self) -> audit.AuditStore | None: ...

    @property
    def engine(self) -> engine_mod.Engine | None: ...


class ApiError(Exception):
    """A failure a handler knows about: answered as ``models.Error`` JSON with ``status``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class State:
    """The API's own state on the application: backend, health, live hub, mode switches."""

    def __init__(self, backend: Backend, health: health_mod.Health, *, allow_action: bool,
                 policies_editable: bool, poll_interval: float = 0.2) -> None:
        self.backend = backend
        self.health = health
        self.allow_action = allow_action
        self.policies_editable = policies_editable
        """Standalone: a mode switch changes the running policy set. In the operator the RecoveryPolicy
        object is the source of truth, so the API refuses (edit the object instead)."""
        self.switched_by: dict[str, str] = {}
        self._queries: tuple[audit.AuditStore, queries.ReadQueries] | None = None
        self.hub = sse.Hub(self._fetch_after, self._last_id, interval=poll_interval)

    def store(self) -> audit.AuditStore:
        store = self.backend.store
        if store is None:
            raise ApiError(503, "the audit store is not open yet (starting up)")
        return store

    def queries(self) -> queries.ReadQueries:
        store = self.store()
        if self._queries is None or self._queries[0] is not store:
            self._queries = (store, queries.ReadQueries(store.sql_engine))
        return self._queries[1]

    async def _fetch_after(self, after: int, limit: int) -> list[audit.AuditRecord]:
        return await self.queries().audit(queries.AuditFilter(after_id=after), descending=False, after=None,
                                          limit=limit - 1)

    async def _last_id(self) -> int:
        return await self.queries().last_audit_id()


STATE: Final = web.AppKey("api_state", State)


def answer(model: BaseModel, status: int = 200) -> web.Response:
    """``model`` as the JSON answer (every answer is one of ``http/models.py``)."""
    return web.Response(text=model.model_dump_json(), status=status, content_type="application/json")


def iso(epoch: float | None) -> str | None:
    return None if epoch is None else audit.iso_utc(audit.to_datetime(epoch))


def audit_item(record: audit.AuditRecord) -> models.AuditItem:
    return models.AuditItem.model_validate(record.to_json())


def query(request: web.Request, allowed: Sequence[str]) -> dict[str, str]:
    """The query parameters, each given at most once and each one of ``allowed`` (else 400)."""
    unknown = sorted(set(request.query) - set(allowed))
    if unknown:
        raise ApiError(400, f"unknown query parameter(s) {', '.join(unknown)}; allowed: {', '.join(allowed)}")
    out: dict[str, str] = {}
    for key in request.query:
        values = request.query.getall(key)
        if len(values) > 1:
            raise ApiError(400, f"query parameter {key} given {len(values)} times; give it once "
                                "(comma-separated values where a list is allowed)")
        out[key] = values[0]
    return out


def limit_of(params: Mapping[str, str]) -> int:
    text = params.get("limit")
    if text is None:
        return DEFAULT_LIMIT
    try:
        value = int(text)
    except ValueError:
        raise ApiError(400, f"limit must be an integer, got {text[:40]!r}") from None
    if not 1 <= value <= MAX_LIMIT:
        raise ApiError(400, f"limit must be between 1 and {MAX_LIMIT}, got {value}")
    return value


def list_of(params: Mapping[str, str], key: str, allowed: Sequence[str] | None = None) -> list[str]:
    text = params.get(key)
    if text is None:
        return []
    values = [v.strip() for v in text.split(",") if v.strip()]
    if not values:
        raise ApiError(400, f"{key} is empty")
    if allowed is not None:
        bad = [v for v in values if v not in allowed]
        if bad:
            raise ApiError(400, f"unknown {key} {', '.join(repr(b[:40]) for b in bad)}; allowed: {', '.join(allowed)}")
    return values


def bool_of(params: Mapping[str, str], key: str) -> bool | None:
    text = params.get(key)
    if text is None:
        return None
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise ApiError(400, f"{key} must be true or false, got {text[:40]!r}")


def time_of(params: Mapping[str, str], key: str) -> datetime.datetime | None:
    text = params.get(key)
    if text is None:
        return None
    try:
        when = times.parse_iso(text)
    except ValueError:
        raise ApiError(400, f"{key} must be an ISO 8601 time such as 2026-11-29T16:00:00Z, got {text[:60]!r}") \
            from None
    return times.as_utc(when)


def int_of(params: Mapping[str, str], key: str) -> int | None:
    text = params.get(key)
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        raise ApiError(400, f"{key} must be an integer, got {text[:40]!r}") from None
    if value < 0:
        raise ApiError(400, f"{key} must not be negative")
    return value


def cursor_fingerprint(params: Mapping[str, str]) -> str:
    """What a cursor is bound to: the filters and the sort (not the page size, not the cursor)."""
    relevant = {k: v for k, v in sorted(params.items()) if k not in ("cursor", "limit")}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:16]


def encode_cursor(kind: str, fingerprint: str, key: list[Any]) -> str:
    raw = json.dumps({"v": 1, "t": kind, "f": fingerprint, "k": key}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(text: str | None, kind: str, fingerprint: str) -> list[Any] | None:
    """The key inside a cursor of ours; 400 for anything else (garbage, another list's, other filters)."""
    if text is None:
        return None
    try:
        data = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise ApiError(400, "malformed cursor: pass the 'next' value of the previous page unchanged") from None
    if not isinstance(data, dict) or data.get("v") != 1 or data.get("t") != kind or not isinstance(data.get("k"), list):
        raise ApiError(400, "malformed cursor: pass the 'next' value of the previous page unchanged")
    if data.get("f") != fingerprint:
        raise ApiError(400, "cursor belongs to other filters or another sort order: start again without a cursor")
    key: list[Any] = data["k"]
    return key


async def read_body(request: web.Request, model: type[BaseModel]) -> Any:
    """The request's JSON body validated as ``model``; 400 naming the first bad field."""
    try:
        data = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ApiError(400, "the body must be a JSON object") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "body"
        raise ApiError(400, f"invalid body: {where}: {first.get('msg')}") from None
