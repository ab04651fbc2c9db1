"""Checks of the metric store (Prometheus or VictoriaMetrics) and its DCGM GPU metrics.

Which DCGM metrics exist for which node (by the hostname label, DCGM exporter's ``Hostname`` by
default), which scheduler nodes have none, and whether the label's values are the scheduler's
node names at all: a label holding FQDNs or pod names silently turns off the GPU evidence.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import aiohttp

from trainguard.doctor import http
from trainguard.doctor.logs import vm_version
from trainguard.doctor.report import Check, fail, ok, warn
from trainguard.signals.gpu_metrics import node_of

DCGM_SELECTOR = '{__name__=~"DCGM_FI_.*"}'

EVIDENCE_METRICS = (
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
)
"""The DCGM exporter fields that carry hardware evidence (Xid, ECC, row remap, NVLink, PCIe,
throttle reasons); a node without DCGM_FI_DEV_XID_ERRORS has no Xid evidence at all."""

SETTING = "TRAINGUARD_PROMETHEUS_URL / --prometheus-url"


async def prometheus(session: aiohttp.ClientSession, url: str, *, hostname_label: str,
                     scheduler_nodes: Sequence[str] | None, limit_s: float,
                     node_regex: re.Pattern[str] | None = None) -> list[Check]:
    """``prometheus`` (reachable, auth, version; Prometheus or VictoriaMetrics), ``prometheus.dcgm``
    (metrics per node) and ``prometheus.hostnames`` (label values vs scheduler node names)."""
    name = "prometheus"
    try:
        info = await http.get(session, http.join(url, "/api/v1/status/buildinfo"), limit_s=limit_s)
    except http.Unreachable as exc:
        return [fail(name, str(exc), f"check {SETTING} (Prometheus :9090, VictoriaMetrics :8428) and that the "
                     "server runs")]
    if info.status in http.AUTH_STATUSES:
        return [fail(name, f"{url} refused us: HTTP {info.status} (authentication)",
                     f"give credentials in {SETTING} (https://USER:PASSWORD@host/) or allow this host")]
    data = info.json()
    if info.status != 200 or not isinstance(data, dict) or data.get("status") != "success":
        return [fail(name, f"{http.describe_status(info, '/api/v1/status/buildinfo')}; not a Prometheus query API",
                     f"point {SETTING} at the Prometheus or VictoriaMetrics base URL (no /api/v1 suffix)")]
    version = str((data.get("data") or {}).get("version") or "unknown")
    kind, vm = "Prometheus", False
    try:
        own = await http.get(session, http.join(url, "/metrics"), limit_s=limit_s)
        found = vm_version(own.text) if own.status == 200 else None
        if found:
            kind, version, vm = "VictoriaMetrics", found, True
    except http.Unreachable:
        pass
    checks = [ok(name, f"{url} answers: {kind} {version}")]
    params = {"query": f"count by (__name__, {hostname_label}) ({DCGM_SELECTOR})"}
    if vm:
        params["latency_offset"] = "1ms"  # VictoriaMetrics hides the newest 30 s of samples by default
    try:
        answer = await http.get(session, http.join(url, "/api/v1/query"), params=params, limit_s=limit_s)
    except http.Unreachable as exc:
        return [*checks, fail(f"{name}.dcgm", f"query failed: {exc}")]
    result = _vector(answer)
    if result is None:
        return [*checks, fail(f"{name}.dcgm", http.describe_status(answer, "/api/v1/query"))]
    if not result:
        return [*checks, warn(f"{name}.dcgm", "no DCGM_FI_* metric in the store: no GPU evidence",
                              "scrape dcgm-exporter on every GPU node (its default fields include the Xid and ECC "
                              "counters)")]
    by_node: dict[str, set[str]] = {}
    unlabelled: set[str] = set()
    for series in result:
        metric = series.get("metric") or {}
        node = str(metric.get(hostname_label, ""))
        if node:
            by_node.setdefault(node, set()).add(str(metric.get("__name__", "")))
        else:
            unlabelled.add(str(metric.get("__name__", "")))
    if not by_node:
        labels = await _labels_of(session, url, params, limit_s)
        return [*checks, fail(f"{name}.dcgm", f"DCGM metrics ({', '.join(sorted(unlabelled)[:3])} ...) carry no "
                              f"label {hostname_label!r} (labels: {', '.join(labels) or 'unknown'})",
                              "set prometheus_hostname_label to the label naming the node (DCGM exporter: "
                              "Hostname)", {"labels": labels})]
    details = {node: sorted(metrics) for node, metrics in sorted(by_node.items())}
    no_xid = sorted(n for n, m in by_node.items() if EVIDENCE_METRICS[0] not in m)
    summary = "; ".join(f"{node}: {len(metrics)} metrics" for node, metrics in sorted(by_node.items())[:8])
    if no_xid:
        checks.append(warn(f"{name}.dcgm", f"DCGM metrics for {len(by_node)} node(s) ({summary}); without "
                           f"{EVIDENCE_METRICS[0]}: {', '.join(no_xid)}", "enable the Xid field in the "
                           "dcgm-exporter counters file", {"metrics_by_node": details}))
    else:
        checks.append(ok(f"{name}.dcgm", f"DCGM metrics for {len(by_node)} node(s) ({summary})",
                         {"metrics_by_node": details}))
    checks.append(hostnames(f"{name}.hostnames", sorted(by_node), scheduler_nodes, hostname_label, node_regex))
    return checks


def hostnames(name: str, label_values: Sequence[str], scheduler_nodes: Sequence[str] | None,
              hostname_label: str, node_regex: re.Pattern[str] | None = None) -> Check:
    """The hostname label's values against the scheduler's node names (``node_of``)."""
    if scheduler_nodes is None:
        return warn(name, f"scheduler not available: {hostname_label} values ({', '.join(label_values[:8])}) "
                    "not compared with node names", "configure --scheduler so that doctor can compare")
    nodes = set(scheduler_nodes)
    mapped = {v: node_of(v, nodes, node_regex) for v in label_values}
    matched = {v for v, node in mapped.items() if node is not None}
    covered = {node for node in mapped.values() if node is not None}
    lacking = sorted(nodes - covered)
    strangers = sorted(set(label_values) - matched)
    details = {"matched": sorted(matched), "not_scheduler_nodes": strangers, "nodes_without_dcgm": lacking}
    if not matched:
        return fail(name, f"no {hostname_label} value is a scheduler node name: values {', '.join(strangers[:8])}; "
                    f"nodes {', '.join(sorted(nodes)[:8])}", "set prometheus_hostname_label to the label holding "
                    "the node name, or make the exporter report the scheduler's node names", details)
    if lacking or strangers:
        parts = []
        if lacking:
            parts.append(f"scheduler nodes without DCGM metrics: {', '.join(lacking)}")
        if strangers:
            parts.append(f"{hostname_label} values that are no scheduler node: {', '.join(strangers)}")
        return warn(name, f"{len(matched)} of {len(nodes)} nodes matched; " + "; ".join(parts),
                    "run dcgm-exporter on the missing nodes; hosts of other clusters can be ignored", details)
    return ok(name, f"every scheduler node ({len(nodes)}) has DCGM metrics under {hostname_label}", details)


def _vector(answer: http.Answer) -> list[dict[str, Any]] | None:
    data = answer.json()
    if answer.status != 200 or not isinstance(data, dict) or data.get("status") != "success":
        return None
    result = (data.get("data") or {}).get("result")
    return [r for r in result if isinstance(r, dict)] if isinstance(result, list) else None


async def _labels_of(session: aiohttp.ClientSession, url: str, params: dict[str, str], limit_s: float) -> list[str]:
    """The label names of a few DCGM series, to tell which label holds the node name."""
    query = {**params, "query": f"topk(3, {DCGM_SELECTOR})"}
    try:
        result = _vector(await http.get(session, http.join(url, "/api/v1/query"), params=query, limit_s=limit_s))
    except http.Unreachable:
        return []
    return sorted({k for r in result or [] for k in (r.get("metric") or {}) if k != "__name__"})
