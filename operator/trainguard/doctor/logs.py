"""Checks of the log stores: VictoriaLogs and Loki.

For each: the server answers and says which version it is; its recent lines carry the fields that
map a line to a job, a host and a file (the same field names the log source uses); how old the
newest line is. A store that answers but holds no recent line is a warning, not a failure: on a
quiet cluster that is normal.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import aiohttp

from trainguard.doctor import http
from trainguard.doctor.report import Check, fail, ok, warn
from trainguard.model import times

RECENT = "1h"
"""How far back the stream checks look for lines."""

LAG_WARN_S = 300.0
"""A newest line older than this, with lines in the window, suggests a stalled shipper."""

_VM_VERSION = re.compile(r'^vm_app_version\{[^}]*?short_version="([^"]+)"', re.MULTILINE)
_VM_VERSION_LONG = re.compile(r'^vm_app_version\{[^}]*?\bversion="([^"]+)"', re.MULTILINE)
_VM_SOURCE_PATH = re.compile(r'/!victoria!(?:logs|metrics)@(v\d+\.\d+\.\d+)/app/victoria-(?:logs|metrics)/')


def vm_version(metrics_text: str) -> str | None:
    """The version a VictoriaMetrics-family server (VictoriaLogs, VictoriaMetrics) reports in its
    own ``/metrics`` (``vm_app_version``). A binary built with plain ``go install`` carries no
    version stamp (empty labels); its module version is still in the source paths of its log
    call sites (``location`` labels of ``vm_log_messages_total``), which is what we read then."""
    m = _VM_VERSION.search(metrics_text) or _VM_VERSION_LONG.search(metrics_text)
    if m:
        return m.group(1)
    m = _VM_SOURCE_PATH.search(metrics_text)
    return f"{m.group(1)} (unstamped build)" if m else None


def _auth_fail(name: str, answer: http.Answer, url: str, setting: str) -> Check:
    return fail(name, f"{url} refused us: HTTP {answer.status} (authentication)",
                f"give credentials in {setting} (https://USER:PASSWORD@host/...) or allow this host")


# ---------------------------------------------------------------------- VictoriaLogs


async def victorialogs(session: aiohttp.ClientSession, url: str, *, job_field: str, host_field: str,
                       path_field: str, limit_s: float) -> list[Check]:
    """``victorialogs`` (reachable, auth, version), ``victorialogs.streams`` (fields, sample) and
    ``victorialogs.lag`` (age of the newest line)."""
    name = "victorialogs"
    setting = "TRAINGUARD_VICTORIALOGS_URL / --victorialogs-url"
    try:
        health = await http.get(session, http.join(url, "/health"), limit_s=limit_s)
    except http.Unreachable as exc:
        return [fail(name, f"{exc}", f"check {setting} (host and port of victoria-logs -httpListenAddr) and "
                     "that the server runs")]
    if health.status in http.AUTH_STATUSES:
        return [_auth_fail(name, health, url, setting)]
    if health.status != 200 or health.text.strip() != "OK":
        return [fail(name, f"{http.describe_status(health, url + '/health')}; not a healthy VictoriaLogs",
                     f"check that {setting} points at VictoriaLogs (port 9428 by default), not another server")]
    version = None
    try:
        metrics = await http.get(session, http.join(url, "/metrics"), limit_s=limit_s)
        if metrics.status == 200:
            version = vm_version(metrics.text)
    except http.Unreachable:
        pass
    checks = [ok(name, f"{url} healthy, version {version or 'unknown (no vm_app_version in /metrics)'}")]
    try:
        answer = await http.get(session, http.join(url, "/select/logsql/query"), limit_s=limit_s,
                                params={"query": f"_time:{RECENT} | sort by (_time desc) | limit 20"})
    except http.Unreachable as exc:
        return [*checks, fail(f"{name}.streams", f"query failed: {exc}")]
    if answer.status in http.AUTH_STATUSES:
        return [*checks, _auth_fail(f"{name}.streams", answer, url, setting)]
    if answer.status != 200:
        return [*checks, fail(f"{name}.streams", http.describe_status(answer, "/select/logsql/query"),
                              "check that the URL is VictoriaLogs' own (no proxy path in front of /select)")]
    rows = answer.json_lines()
    checks.extend(stream_checks(name, rows, fields={"job": job_field, "host": host_field, "path": path_field},
                                settings={"job": "victorialogs_job_field", "host": "victorialogs_host_field",
                                          "path": "victorialogs_path_field"},
                                stream_of=lambda row: str(row.get("_stream", "")),
                                time_of=lambda row: _rfc3339(str(row.get("_time", "")))))
    return checks


# ---------------------------------------------------------------------- Loki


async def loki(session: aiohttp.ClientSession, url: str, *, job_label: str, host_label: str, path_label: str,
               selector: str = "", headers: Mapping[str, str] | None = None, limit_s: float) -> list[Check]:
    """``loki`` (``/ready``, auth, ``/loki/api/v1/status/buildinfo``), ``loki.streams`` (labels,
    sample stream) and ``loki.lag`` (age of the newest line), per Loki's documented HTTP API.
    ``headers``: the tenant and credentials the Loki source sends; ``selector``: its extra matchers."""
    name = "loki"
    setting = "TRAINGUARD_LOKI_URL / --loki-url"
    auth = dict(headers or {})

    async def get(path: str, params: dict[str, str] | None = None) -> http.Answer:
        return await http.get(session, http.join(url, path), params=params, limit_s=limit_s, headers=auth)

    try:
        ready = await get("/ready")
    except http.Unreachable as exc:
        return [fail(name, f"{exc}", f"check {setting} (Loki's HTTP port, 3100 by default) and that Loki runs")]
    if ready.status in http.AUTH_STATUSES:
        return [_loki_auth_fail(name, ready, url)]
    if ready.status != 200 or "ready" not in ready.text.lower():
        return [fail(name, f"{http.describe_status(ready, url + '/ready')}; Loki is not ready",
                     "wait for Loki to finish starting, or check that the URL is Loki's")]
    version = "unknown"
    try:
        info = await get("/loki/api/v1/status/buildinfo")
        data = info.json()
        if info.status == 200 and isinstance(data, dict) and data.get("version"):
            version = str(data["version"])
    except http.Unreachable:
        pass
    checks = [ok(name, f"{url} ready, version {version}")]
    now_ns = time.time_ns()
    matchers = ", ".join(m for m in (f'{job_label}=~".+"', selector.strip().strip("{}").strip()) if m)
    params = {"query": f"{{{matchers}}}", "limit": "20", "direction": "backward",
              "start": str(now_ns - 3600 * times.NS), "end": str(now_ns)}
    try:
        answer = await get("/loki/api/v1/query_range", params)
    except http.Unreachable as exc:
        return [*checks, fail(f"{name}.streams", f"query failed: {exc}")]
    if answer.status in http.AUTH_STATUSES:
        return [*checks, _loki_auth_fail(f"{name}.streams", answer, url)]
    if answer.status != 200:
        return [*checks, fail(f"{name}.streams", http.describe_status(answer, "/loki/api/v1/query_range"),
                              "check loki_selector: it must be valid LogQL label matchers")]
    rows = _loki_rows(answer.json())
    if not rows:
        # No recent line carries the job label: a store without that label at all is misconfigured
        # (fail, naming the labels it has); one with the label but no recent line is just quiet.
        labels = await _loki_labels(get)
        if labels and job_label not in labels:
            return [*checks, fail(f"{name}.streams", f"no stream carries the label {job_label!r} that maps a line "
                                  f"to its job (labels in the store: {', '.join(labels)})",
                                  f"set loki_job_label to the label holding the Slurm job id, or make the shipper "
                                  f"add {job_label!r}", {"labels": labels})]
        return [*checks, warn(f"{name}.streams", f"no line with the label {job_label!r} in the last {RECENT}: "
                              "nothing to check the fields on", "run a job with a log shipper pointed at this "
                              "store, then run doctor again", {"labels": labels})]
    checks.extend(stream_checks(name, rows, fields={"job": job_label, "host": host_label, "path": path_label},
                                settings={"job": "loki_job_label", "host": "loki_host_label",
                                          "path": "loki_path_label"},
                                stream_of=lambda row: _loki_stream_text(row["_labels"]),
                                time_of=lambda row: float(row["_ns"]) / times.NS))
    return checks


def _loki_rows(data: Any) -> list[dict[str, Any]]:
    """A ``query_range`` answer of resultType ``streams`` as rows: labels merged with ``_ns`` and ``_msg``."""
    result = data.get("data", {}).get("result") if isinstance(data, dict) else None
    rows: list[dict[str, Any]] = []
    for stream in result if isinstance(result, list) else []:
        labels = stream.get("stream") if isinstance(stream, dict) else None
        if not isinstance(labels, dict):
            continue
        for value in stream.get("values") or []:
            if isinstance(value, list) and len(value) >= 2 and str(value[0]).isdigit():
                rows.append({**labels, "_labels": labels, "_ns": str(value[0]), "_msg": str(value[1])})
    rows.sort(key=lambda row: int(row["_ns"]), reverse=True)
    return rows


async def _loki_labels(get: Callable[[str], Awaitable[http.Answer]]) -> list[str]:
    try:
        answer = await get("/loki/api/v1/labels")
    except http.Unreachable:
        return []
    data = answer.json()
    values = data.get("data") if isinstance(data, dict) else None
    return sorted(str(v) for v in values) if isinstance(values, list) else []


def _loki_auth_fail(name: str, answer: http.Answer, url: str) -> Check:
    return fail(name, f"{url} refused us: HTTP {answer.status} (authentication or tenant)",
                "set loki_tenant (X-Scope-OrgID) and loki_token_file or loki_username + loki_password_file as "
                "the Loki gateway expects")


def _loki_stream_text(labels: dict[str, Any]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


# ---------------------------------------------------------------------- shared


def stream_checks(name: str, rows: list[dict[str, Any]], *, fields: dict[str, str], settings: dict[str, str],
                  stream_of: Any, time_of: Any, now: float | None = None) -> list[Check]:
    """``NAME.streams`` and ``NAME.lag`` from the newest rows (newest first) of a log store.

    The job field is required (without it no line reaches a job: fail); the host and path fields
    are warned about (lines still reach the job, but not a rank's host or an attempt's file)."""
    if not rows:
        return [warn(f"{name}.streams", f"no log line in the last {RECENT}: nothing to check the fields on",
                     "run a job with a log shipper pointed at this store, then run doctor again")]
    newest = rows[0]
    sample = {"stream": stream_of(newest), "message": str(newest.get("_msg", ""))[:300]}
    missing = {role: field for role, field in fields.items() if not any(str(r.get(field, "")) for r in rows)}
    with_job = [r for r in rows if str(r.get(fields["job"], ""))]
    checks: list[Check] = []
    if "job" in missing:
        seen = sorted({k for r in rows for k in r if not k.startswith("_")})
        checks.append(fail(f"{name}.streams", f"none of the {len(rows)} newest lines carries the field "
                           f"{fields['job']!r} that maps a line to its job (fields seen: {', '.join(seen) or 'none'})",
                           f"set {settings['job']} to the field holding the Slurm job id, or make the shipper add "
                           f"{fields['job']!r}", {"sample": sample, "fields_seen": seen}))
    elif missing:
        names = ", ".join(f"{field!r} ({settings[role]})" for role, field in missing.items())
        checks.append(warn(f"{name}.streams", f"lines carry {fields['job']!r} but not {names}; sample stream "
                           f"{sample['stream']}", "add the field to the shipper's stream fields, or set the setting "
                           "to the field name it uses", {"sample": sample}))
    else:
        jobs = sorted({str(r.get(fields["job"])) for r in with_job})
        checks.append(ok(f"{name}.streams", f"lines carry {', '.join(repr(f) for f in fields.values())} "
                         f"(jobs seen: {', '.join(jobs[:5])}{' ...' if len(jobs) > 5 else ''}); sample stream "
                         f"{sample['stream']}", {"sample": sample}))
    newest_t = time_of(newest)
    if newest_t is None:
        checks.append(warn(f"{name}.lag", "cannot read the time of the newest line"))
        return checks
    lag = max(0.0, (now if now is not None else time.time()) - newest_t)
    text = f"newest line {lag:.1f} s old"
    if lag > LAG_WARN_S:
        checks.append(warn(f"{name}.lag", text, "check that the log shipper runs and can reach the store "
                           "(or the cluster is idle)", {"lag_s": round(lag, 3)}))
    else:
        checks.append(ok(f"{name}.lag", text, {"lag_s": round(lag, 3)}))
    return checks


_RFC3339 = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$")


def _rfc3339(text: str) -> float | None:
    """VictoriaLogs' ``_time`` (RFC 3339 with up to nanoseconds) -> epoch seconds."""
    if _RFC3339.match(text.strip()) is None:
        return None
    return times.parse_rfc3339_ns(text) / times.NS
