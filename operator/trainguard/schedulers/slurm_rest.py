"""The ``slurm-rest://host:port`` transport: slurmrestd with a JWT.

Implements ``base.Scheduler`` over slurmrestd for deployments where the operator cannot run
Slurm commands (Slinky: ``<name>-restapi:6820``). The API version is detected from the
server's OpenAPI document (newest ``v0.0.38``..``v0.0.44`` offered) and JSON is parsed by
``slurm_cli.job_from_json`` like ``squeue --json``.

What slurmrestd cannot do (verified on 22.05, per ``shared`` research on 24.11): requeue and
requeue-hold before v0.0.45, node drain/resume and ExcNodeList on v0.0.38. Those go to the
``fallback`` scheduler (a CLI transport) when one is configured, else raise ``Unsupported``
naming the version; each delegated call is logged with the transport that performed it.
22.05 answers HTTP 200 with an ``errors[]`` list when it fails: every answer is checked.
"""

from __future__ import annotations

import ast
import json
import logging
import re
from typing import Any

import aiohttp

from trainguard.model import workloads
from trainguard.schedulers import base, slurm_cli, slurm_commands, tokens

logger = logging.getLogger(__name__)

SUPPORTED_MINORS = range(38, 45)
"""data_parser versions v0.0.38 (22.05) .. v0.0.44 (25.11; also served by 26.05, the version
SchedMD's slurm-operator v1.x speaks) whose JSON shapes we parse."""

_VERSION_RE = re.compile(r"/slurm/v0\.0\.(\d+)/")

TOKEN_REJECTED = frozenset({401, 403, 511})
"""HTTP statuses of a rejected JWT: 401/403 from proxies and older servers; slurmrestd 24.11 answers
an invalid token with 511 ("Protocol authentication error")."""


_AFTER_CLOSE_RE = re.compile(r"b(['\"].*['\"])\s*\^?\s*$", re.DOTALL)
_SECOND_STATUS_RE = re.compile(rb"HTTP/1\.[01] (\d{3})\b")


def _answer_before_close(exc: aiohttp.ClientResponseError) -> tuple[int, str] | None:
    """(status, body) of an error answer followed by a second one, else None.

    slurmrestd 26.05 answers an error (a rejected JWT: 511; an unknown job: 404; ...) with its JSON
    ``errors``, then writes a second, plain-text answer with the same status on the same
    ``Connection: close`` connection. aiohttp refuses that as a protocol error ("Data after
    `Connection: close`", status 400) and keeps the bytes it read in the message: the JSON body and
    the second status line. Those are the answer; anything else stays a failed request."""
    text = str(exc.message)
    if not text.startswith("Data after `Connection: close`"):
        return None
    found = _AFTER_CLOSE_RE.search(text)
    if found is None:
        return None
    try:
        data = ast.literal_eval("b" + found.group(1))
    except (ValueError, SyntaxError):
        return None
    second = _SECOND_STATUS_RE.search(data) if isinstance(data, bytes) else None
    if second is None:
        return None
    return int(second.group(1)), data[:second.start()].decode("utf-8", "replace")


class SlurmRest:
    """``base.Scheduler`` over slurmrestd. ``token`` is a Slurm JWT (``scontrol token``), or a
    ``tokens.TokenSource`` asked before every request (a rotated token file)."""

    def __init__(
        self,
        url: str,
        *,
        token: str | tokens.TokenSource,
        user: str = "root",
        fallback: base.Scheduler | None = None,
        timeout: float = 30.0,
        api_version: str | None = None,
        cluster: str | None = None,
    ) -> None:
        try:
            self._token = tokens.StaticToken(token) if isinstance(token, str) else token
        except ValueError as exc:
            raise base.SchedulerError(str(exc)) from None
        self.name = f"slurm-rest://{url.split('://', 1)[-1]}"
        self._url = url.rstrip("/")
        self._headers = {"X-SLURM-USER-NAME": user, "Accept": "application/json"}
        self._fallback = fallback
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None
        self._version = api_version
        self._cluster = cluster or ""

    # ------------------------------------------------------------ plumbing

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(headers=self._headers, timeout=self._timeout)
        return self._session

    async def _raw(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        url = f"{self._url}{path}"
        try:
            token = self._token.token()
        except ValueError as exc:
            raise base.SchedulerError(f"{self.name}: {exc}") from None
        try:
            async with self._http().request(method, url, json=body, headers={"X-SLURM-USER-TOKEN": token}) as resp:
                text = await resp.text(errors="replace")
                status = resp.status
        except aiohttp.ClientConnectorError as exc:
            if isinstance(exc.os_error, ConnectionRefusedError):
                raise base.SchedulerError(f"{self.name}: connection refused to {url}: is slurmrestd running and "
                                          "listening on that port?") from exc
            reason = exc.os_error.strerror or str(exc.os_error) or type(exc.os_error).__name__
            raise base.SchedulerError(f"{self.name}: cannot connect to {url}: {reason}") from exc
        except TimeoutError as exc:
            raise base.SchedulerError(f"{self.name}: {method} {url}: no answer within "
                                      f"{self._timeout.total:g} s") from exc
        except aiohttp.ClientResponseError as exc:
            recovered = _answer_before_close(exc)
            if recovered is None:
                raise base.SchedulerError(f"{self.name}: {method} {path} failed: {exc or type(exc).__name__}") from exc
            status, text = recovered
        except aiohttp.ClientError as exc:
            raise base.SchedulerError(f"{self.name}: {method} {path} failed: {exc or type(exc).__name__}") from exc
        if status in TOKEN_REJECTED:
            raise base.SchedulerError(f"{self.name}: token rejected with HTTP {status} by {url}; is the JWT valid "
                                      "and unexpired?")
        try:
            data = json.loads(text) if text.strip() else {}
        except json.JSONDecodeError:
            msg = f"{self.name}: {method} {path}: HTTP {status}, not JSON: {text[:200]!r}"
            raise base.SchedulerError(msg) from None
        errors = [e for e in (data.get("errors") or []) if isinstance(e, dict)] if isinstance(data, dict) else []
        if errors:
            msg = "; ".join(_error_text(e) for e in errors)
            if slurm_commands.is_gone(msg):
                raise base.JobGone(f"{self.name}: {msg}")
            hint = " (an invalid or expired JWT looks like this)" if status == 500 and "Unspecified" in msg else ""
            raise base.SchedulerError(f"{self.name}: {method} {path}: HTTP {status}: {msg}{hint}")
        if status >= 400 or not isinstance(data, dict):
            raise base.SchedulerError(f"{self.name}: {method} {path}: HTTP {status}")
        return data

    async def api_version(self) -> str:
        """Newest supported ``v0.0.x`` the server offers, read once from its OpenAPI document."""
        if self._version is None:
            found: set[int] = set()
            failures: list[base.SchedulerError] = []
            for path in ("/openapi/v3", "/openapi"):
                try:
                    doc = await self._raw("GET", path)
                except base.SchedulerError as exc:
                    failures.append(exc)
                    continue
                found = {int(m.group(1)) for p in doc.get("paths") or {} if (m := _VERSION_RE.match(str(p)))}
                if found:
                    break
            if not found and len(failures) == 2:
                # No OpenAPI document came back at all: say why (connection refused, token rejected,
                # HTTP 404 from something that is not slurmrestd) instead of "offered: none".
                raise failures[0]
            usable = sorted(v for v in found if v in SUPPORTED_MINORS)
            if not usable:
                offered = ", ".join(f"v0.0.{v}" for v in sorted(found)) or "none"
                raise base.Unsupported(f"{self.name}: no supported API version (offered: {offered}; we speak "
                                       f"v0.0.{SUPPORTED_MINORS[0]}..v0.0.{SUPPORTED_MINORS[-1]})")
            self._version = f"v0.0.{usable[-1]}"
            logger.info("%s: using API %s", self.name, self._version)
        return self._version

    async def ping(self) -> str:
        """The Slurm release slurmrestd reports (``meta.Slurm.release``, e.g. ``22.05.8``) from an
        authenticated ``/ping``: proves the address, the API version and the token at once."""
        data = await self._slurm("GET", "/ping")
        meta = data.get("meta")
        slurm = (meta.get("Slurm") or meta.get("slurm") or {}) if isinstance(meta, dict) else {}
        release = slurm.get("release") if isinstance(slurm, dict) else None
        if not release and isinstance(slurm, dict) and isinstance(slurm.get("version"), dict):
            version = slurm["version"]
            release = ".".join(str(version.get(k, "?")) for k in ("major", "minor", "micro"))
        return str(release or "unknown")

    async def _minor(self) -> int:
        return int((await self.api_version()).rsplit(".", 1)[-1])

    async def _slurm(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self._raw(method, f"/slurm/{await self.api_version()}{path}", body)

    async def _delegate(self, op: str, *args: Any) -> None:
        version = await self.api_version()
        if self._fallback is None:
            raise base.Unsupported(f"{self.name}: slurmrestd {version} cannot {op}; configure a CLI fallback")
        logger.info("%s: %s %s performed by %s (slurmrestd %s cannot)", self.name, op,
                    " ".join(map(str, args)), self._fallback.name, version)
        await getattr(self._fallback, op)(*args)

    # ------------------------------------------------------------ reads

    async def list_jobs(self) -> list[workloads.JobSnapshot]:
        data = await self._slurm("GET", "/jobs")
        out = []
        for rec in data.get("jobs") or []:
            if isinstance(rec, dict) and slurm_cli.opted_in(str(rec.get("comment") or "")):
                snap = slurm_cli.job_from_json(rec, self._cluster)
                if snap is not None:
                    out.append(snap)
        return out

    async def get_job(self, job_id: str) -> workloads.JobSnapshot:
        data = await self._slurm("GET", f"/job/{slurm_cli.validate_job_id(job_id)}")
        recs = [r for r in data.get("jobs") or [] if isinstance(r, dict)]
        snaps = [s for r in recs if (s := slurm_cli.job_from_json(r, self._cluster))]
        for snap in snaps:
            if snap.job_id == job_id:
                return snap
        if len(snaps) == 1:
            return snaps[0]
        raise base.JobGone(f"{self.name}: job {job_id} not found")

    async def list_nodes(self) -> list[workloads.NodeSnapshot]:
        data = await self._slurm("GET", "/nodes")
        return [slurm_cli.node_from_json(rec) for rec in data.get("nodes") or [] if isinstance(rec, dict)]

    # ------------------------------------------------------------ job operations

    async def requeue(self, job_id: str) -> None:
        await self._delegate("requeue", slurm_cli.validate_job_id(job_id))

    async def requeue_hold(self, job_id: str, *, attempt: int | None = None) -> None:
        await self._delegate("requeue_hold", slurm_cli.validate_job_id(job_id))

    async def hold(self, job_id: str) -> None:
        logger.info("%s: hold %s", self.name, job_id)
        await self._slurm("POST", f"/job/{slurm_cli.validate_job_id(job_id)}", {"hold": True})

    async def release(self, job_id: str) -> None:
        logger.info("%s: release %s", self.name, job_id)
        try:
            await self._slurm("POST", f"/job/{slurm_cli.validate_job_id(job_id)}", {"hold": False})
        except base.JobGone:
            raise
        except base.SchedulerError as exc:
            if slurm_commands.FINISHED_MESSAGE not in str(exc):
                raise
            logger.info("%s: %s already finished, nothing held", self.name, job_id)

    async def cancel(self, job_id: str) -> None:
        logger.info("%s: cancel %s", self.name, job_id)
        await self._slurm("DELETE", f"/job/{slurm_cli.validate_job_id(job_id)}")

    async def exclude_nodes(self, job_id: str, nodes: list[str]) -> None:
        if await self._minor() < 39:
            await self._delegate("exclude_nodes", slurm_cli.validate_job_id(job_id), nodes)
            return
        for node in nodes:
            slurm_cli.validate_node(node)
        unknown = sorted(set(nodes) - {n.name for n in await self.list_nodes()})
        if unknown:
            raise base.SchedulerError(f"{self.name}: cannot exclude unknown node(s) {', '.join(unknown)}")
        job = await self.get_job(job_id)
        merged = list(job.excluded_nodes) + [n for n in dict.fromkeys(nodes) if n not in job.excluded_nodes]
        if merged == list(job.excluded_nodes):
            return
        if job.state not in slurm_commands.EXCLUDABLE_STATES:
            raise base.SchedulerError(
                f"{self.name}: excluded nodes can only change while a job is pending; {job_id} is {job.state}"
            )
        logger.info("%s: exclude %s from %s", self.name, ",".join(nodes), job_id)
        await self._slurm("POST", f"/job/{job_id}", {"excluded_nodes": merged})

    # ------------------------------------------------------------ node operations

    async def _node(self, node: str) -> workloads.NodeSnapshot:
        slurm_cli.validate_node(node)
        for snap in await self.list_nodes():
            if snap.name == node:
                return snap
        raise base.SchedulerError(f"{self.name}: unknown node {node!r}")

    async def drain_node(self, node: str, reason: str) -> None:
        if await self._minor() < 39:
            await self._delegate("drain_node", slurm_cli.validate_node(node), reason)
            return
        snap = await self._node(node)
        if snap.drained:
            logger.info("%s: %s already drained (%s)", self.name, node, snap.reason)
            return
        logger.info("%s: drain %s", self.name, node)
        await self._slurm("POST", f"/node/{node}", {"state": ["DRAIN"], "reason": slurm_commands.our_reason(reason)})

    async def resume_node(self, node: str) -> None:
        if await self._minor() < 39:
            await self._delegate("resume_node", slurm_cli.validate_node(node))
            return
        snap = await self._node(node)
        if not snap.drained:
            return
        if not snap.reason.startswith(base.OUR_REASON_PREFIX):
            raise base.SchedulerError(
                f"{self.name}: refusing to resume {node}: its drain is not ours ({snap.reason!r})"
            )
        logger.info("%s: resume %s", self.name, node)
        await self._slurm("POST", f"/node/{node}", {"state": ["RESUME"]})

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._fallback is not None:
            await self._fallback.close()


def _error_text(err: dict[str, Any]) -> str:
    """slurmrestd's ``{"error": ..., "description": ...}`` as one readable phrase."""
    error, description = str(err.get("error") or ""), str(err.get("description") or "")
    if error and description and description != error:
        return f"{error} ({description})"
    return error or description or json.dumps(err)
