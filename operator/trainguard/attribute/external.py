"""Optional external attribution service over HTTP (NVIDIA Attribution style), time-boxed.

Place in the loop: after ``attribute.rules`` produced the built-in verdict and before
``policy.decide``. The engine calls it only when the policy names a service
(``spec.attribution.url``). The loop never depends on it: any failure (timeout, connection
refused, non-2xx, a body that is not the JSON below, an unknown attribution value) returns the
built-in verdict with ``fallback_reason`` set, and that reason goes into the audit log.

Request: ``POST <url>``, ``Content-Type: application/json``::

    {
      "schemaVersion": 1,
      "workload": "slurm/cluster/42",          # "" when unknown
      "attempt": 0,                            # null when unknown
      "anomaly": {                             # trainguard.model.anomalies.Anomaly as JSON
        "symptom": "crash", "category": "gpu_xid_hardware", "attribution_hint": "hardware",
        "evidence": [{"line": 12, "text": "...", "pattern": "gpu.xid", "node": "node3", "rank": 5,
                      "gpu": 2, "xid": 79, "at": 1700000000.0, ...}],
        "suspect_nodes": ["node3"], "suspect_ranks": [5], "first_seen_at": ..., "detected_at": ...,
        "summary": "..."
      },
      "builtin": {                             # our own verdict, for comparison
        "attribution": "hardware", "category": "gpu_xid_hardware", "suspect_nodes": ["node3"],
        "suspect_ranks": [5], "confidence": 0.9, "reasons": ["..."]
      }
    }

Response: HTTP 2xx with a JSON object (unknown keys ignored)::

    {
      "attribution": "hardware" | "system" | "application" | "unknown",   # required
      "nodes": ["node3"],                      # required, suspect node names (may be empty)
      "confidence": 0.8,                       # required, 0..1
      "category": "ecc_memory",                # optional, a Trainguard category
      "ranks": [5],                            # optional
      "reasons": ["..."]                       # optional, shown in the audit log
    }

Body at most 1 MiB; node names must look like host names (they end up in scheduler argv).
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from typing import Annotated, Literal

import aiohttp
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trainguard.model import anomalies, verdicts, vocab

SCHEMA_VERSION = 1
MAX_RESPONSE_BYTES = 1024 * 1024
_BUILTIN_FIELDS = {"attribution", "category", "suspect_nodes", "suspect_ranks", "confidence", "reasons"}
NodeName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")]


class Answer(BaseModel):
    """The service's response body (see the module docstring)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    attribution: Literal["hardware", "system", "application", "unknown"]
    nodes: list[NodeName] = Field(max_length=4096)
    confidence: float = Field(ge=0.0, le=1.0)
    category: vocab.Category | None = None
    ranks: list[Annotated[int, Field(ge=0)]] = Field(default_factory=list, max_length=1_000_000)
    reasons: list[Annotated[str, Field(max_length=2000)]] = Field(default_factory=list, max_length=100)


class ExternalAttribution:
    """A client of one attribution service. ``session`` is borrowed (the caller closes it); when
    None, each call opens and closes its own session."""

    def __init__(self, url: str, timeout_s: float, session: aiohttp.ClientSession | None = None) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.session = session
        self.source = _public(url)
        """The URL without credentials or query, as written into verdicts and the audit log."""

    async def attribute(
        self,
        anomaly: anomalies.Anomaly,
        builtin: verdicts.Verdict,
        *,
        workload: str = "",
        attempt: int | None = None,
    ) -> verdicts.Verdict:
        """The service's verdict, or ``builtin`` with ``fallback_reason`` on any failure."""
        request = {
            "schemaVersion": SCHEMA_VERSION,
            "workload": workload,
            "attempt": attempt,
            "anomaly": anomaly.model_dump(mode="json"),
            "builtin": builtin.model_dump(mode="json", include=_BUILTIN_FIELDS),
        }
        try:
            async with asyncio.timeout(self.timeout_s):
                status, body = await self._post(request)
        except TimeoutError:
            return self._fallback(builtin, f"no answer within {self.timeout_s:g} s")
        except (aiohttp.ClientError, OSError) as exc:
            return self._fallback(builtin, f"request failed: {type(exc).__name__}: {exc}"[:300])
        if not 200 <= status < 300:
            return self._fallback(builtin, f"HTTP {status}")
        if body is None:
            return self._fallback(builtin, f"response larger than {MAX_RESPONSE_BYTES} bytes")
        try:
            answer = Answer.model_validate(json.loads(body))
        except (ValueError, ValidationError) as exc:
            return self._fallback(builtin, f"malformed response: {str(exc).splitlines()[0][:200]}")
        return self._verdict(answer, builtin)

    async def _post(self, request: dict[str, object]) -> tuple[int, bytes | None]:
        if self.session is not None:
            return await self._exchange(self.session, request)
        async with aiohttp.ClientSession() as session:
            return await self._exchange(session, request)

    async def _exchange(self, session: aiohttp.ClientSession, request: dict[str, object]) -> tuple[int, bytes | None]:
        async with session.post(self.url, json=request, allow_redirects=False) as response:
            body = bytearray()
            while chunk := await response.content.read(64 * 1024):
                body.extend(chunk)
                if len(body) > MAX_RESPONSE_BYTES:
                    return response.status, None
            return response.status, bytes(body)

    def _fallback(self, builtin: verdicts.Verdict, reason: str) -> verdicts.Verdict:
        return builtin.model_copy(update={"fallback_reason": f"external attribution {self.source}: {reason}"})

    def _verdict(self, answer: Answer, builtin: verdicts.Verdict) -> verdicts.Verdict:
        nodes = list(dict.fromkeys(answer.nodes))
        return verdicts.Verdict(
            attribution=vocab.Attribution(answer.attribution),
            category=answer.category or builtin.category,
            suspect_nodes=nodes,
            suspect_ranks=list(dict.fromkeys(answer.ranks)),
            confidence=answer.confidence,
            source=self.source,
            reasons=[f"external attribution {self.source}", *answer.reasons],
            lemon_nodes=[node for node in builtin.lemon_nodes if node in nodes],
        )


def _public(url: str) -> str:
    """``url`` without user info, query or fragment (they may hold tokens)."""
    try:
        parts = urllib.parse.urlsplit(url)
        netloc = f"{parts.hostname}:{parts.port}" if parts.port else parts.hostname or ""
    except ValueError:
        return "external-attribution"
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))
