"""GPU evidence from Prometheus or VictoriaMetrics: DCGM-exporter series over an attempt's window.

Place in the loop: a signal source beside the log tailers. The engine asks it, per attempt,
what the job's nodes' GPUs reported between the attempt's start and now (``window``); attribution
(``attribute.evidence``) and metric-based detection use the answer.

Why: a job that dies with ``CUDA error: unknown error`` says nothing about the GPU; DCGM's Xid
gauge, ECC and row-remap fields on the node say it was the hardware. Both Prometheus and
VictoriaMetrics answer the Prometheus query API, so one client serves both.

How, per DCGM field (instant queries evaluated at the window's end, range = the window):
- counters (ECC, NVLink, PCIe): ``max_over_time - min_over_time``, the increase inside the window
  (exact on both servers; ``increase()`` extrapolates differently on each);
- the Xid gauge (the *last* Xid seen): ``changes()`` finds GPUs whose value changed in the window,
  whose raw samples then give the new value and when it appeared (a value left from before the
  attempt is not this attempt's);
- the row-remap failure flag: a rise inside the window (``max - min``);
- the throttle-reason bitmask: its last value, hardware bits named (context, not a fault).
Series carry the node in a label (DCGM's default ``Hostname``, configurable); label values map
to scheduler node names as they are, by the part before the first dot, or by a configured regex.

The client (``prometheus-api-client``) is synchronous: every query runs on a worker thread with a
timeout, never on the event loop. An unreachable server, an error or missing series make the
source "unavailable" with the reason; nothing here raises into the loop.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from trainguard.model import evidence, vocab

logger = logging.getLogger(__name__)

SOURCE = "prometheus"

XID = "DCGM_FI_DEV_XID_ERRORS"
ROW_REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
THROTTLE = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"


@dataclass(frozen=True)
class CounterSpec:
    metric: str
    category: vocab.Category
    fault: bool
    what: str


_ECC, _NVLINK = vocab.Category.ECC_MEMORY, vocab.Category.NVLINK
COUNTERS: tuple[CounterSpec, ...] = (
    CounterSpec("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", _ECC, True, "uncorrectable (double-bit) ECC errors"),
    CounterSpec(ROW_REMAP_FAILURE, _ECC, True, "row-remap failure"),
    CounterSpec("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", _NVLINK, True, "NVLink recovery errors"),
    CounterSpec("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", _ECC, False, "correctable (single-bit) ECC errors"),
    CounterSpec("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", _NVLINK, False, "NVLink CRC flit errors"),
    CounterSpec("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", _NVLINK, False, "NVLink replays"),
    CounterSpec("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", vocab.Category.NONE, False, "PCIe replays"),
)
"""DCGM fields read as "rose during the attempt". ``fault``: hardware on its own (NVIDIA: an
uncorrectable error or a failed repair); the rest are context that corroborates."""

HARDWARE_XIDS = frozenset({48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 121, 140, 143, 154})
"""Xids NVIDIA documents as hardware/driver-recovery events (the same set as the log rules use)."""

THROTTLE_HW_BITS = {0x8: "HW slowdown", 0x40: "HW thermal slowdown", 0x80: "HW power brake slowdown"}
"""Hardware clock-throttle reasons in DCGM's bitmask (nvmlClocksThrottleReasons)."""


def node_of(value: str, nodes: Collection[str], node_regex: re.Pattern[str] | None = None) -> str | None:
    """The scheduler node a hostname label value names: with ``node_regex``, its first group (or
    whole match); else the value itself, or its part before the first dot (the exporter may report
    an FQDN where Slurm uses the short name). ``trainguard doctor`` maps label values the same way."""
    if node_regex is not None:
        match = node_regex.search(value)
        if match is None:
            return None
        name = match.group(1) if match.groups() else match.group(0)
        return name if name in nodes else None
    if value in nodes:
        return value
    short = value.split(".", 1)[0]
    return short if short in nodes else None


@dataclass(frozen=True)
class GpuMetricsConfig:
    url: str
    hostname_label: str = "Hostname"
    node_regex: str | None = None
    """Regex applied to the label value; its first group (or the whole match) is the node name."""
    timeout_s: float = 5.0
    wait_s: float = 0.0
    """How long the engine gives a fault to reach the server before deciding on a crash its log
    cannot attribute (DCGM's sampling plus the scrape interval); 0: decide at once."""


class _Unavailable(Exception):
    pass


class GpuMetrics:
    """Queries one Prometheus-API server for the DCGM evidence of a set of nodes."""

    def __init__(self, config: GpuMetricsConfig) -> None:
        self.config = config
        self._label = config.hostname_label
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", self._label):
            raise ValueError(f"prometheus hostname label {self._label!r} is not a Prometheus label name")
        self._node_re = re.compile(config.node_regex) if config.node_regex else None
        self._client: Any = None

    # ------------------------------------------------------------------ public

    async def window(self, nodes: Sequence[str], start: float, end: float) -> evidence.NodeEvidence:
        """Findings on ``nodes`` between ``start`` and ``end`` (epoch seconds), and the source's state."""
        nodes = sorted(set(nodes))
        if not nodes:
            return evidence.NodeEvidence(sources=[self._status(evidence.SourceState.UNAVAILABLE,
                                                               "the workload has no nodes yet")])
        try:
            findings, seen = await asyncio.wait_for(
                asyncio.to_thread(self._collect, nodes, start, end), timeout=self.config.timeout_s * 4
            )
        except (TimeoutError, _Unavailable) as exc:
            reason = str(exc) or f"no answer from {self.config.url} within {self.config.timeout_s * 4:g} s"
            return evidence.NodeEvidence(sources=[self._status(evidence.SourceState.UNAVAILABLE, reason)])
        except Exception as exc:  # the source must never break the loop
            logger.warning("gpu metrics from %s failed: %s", self.config.url, exc)
            return evidence.NodeEvidence(sources=[self._status(evidence.SourceState.UNAVAILABLE,
                                                               f"{type(exc).__name__}: {exc}")])
        missing = [node for node in nodes if node not in seen]
        if len(missing) == len(nodes):
            why = (f"no DCGM series ({XID}) with label {self._label} for {', '.join(missing)} "
                   f"at {self.config.url}")
            return evidence.NodeEvidence(findings=findings,
                                         sources=[self._status(evidence.SourceState.UNAVAILABLE, why)])
        note = f"no DCGM series for {', '.join(missing)}" if missing else ""
        return evidence.NodeEvidence(findings=findings, sources=[self._status(evidence.SourceState.USED, note)])

    def _status(self, state: evidence.SourceState, reason: str) -> evidence.SourceStatus:
        return evidence.SourceStatus(name=SOURCE, state=state, reason=reason)

    # ------------------------------------------------------------------ on the worker thread

    def _query(self, promql: str, at: float) -> list[dict[str, Any]]:
        from prometheus_api_client import PrometheusConnect
        from prometheus_api_client.exceptions import PrometheusApiClientException

        if self._client is None:
            self._client = PrometheusConnect(url=self.config.url, disable_ssl=False, retry=None,
                                             timeout=self.config.timeout_s)
        try:
            result = self._client.custom_query(promql, params={"time": f"{at:.3f}"})
        except PrometheusApiClientException as exc:
            raise _Unavailable(f"{self.config.url} refused the query: {exc}") from exc
        except OSError as exc:  # requests' ConnectionError/Timeout are OSErrors
            raise _Unavailable(f"{self.config.url} unreachable: {exc}") from exc
        return list(result) if isinstance(result, list) else []

    def _selector(self, metric: str, nodes: Sequence[str]) -> str:
        names = "|".join(re.escape(node) for node in nodes)
        pattern = f".*(?:{names}).*" if self._node_re is not None else f"(?:{names})(?:[.].*)?"
        escaped = pattern.replace("\\", "\\\\").replace('"', '\\"')
        return f'{metric}{{{self._label}=~"{escaped}"}}'

    def _node_of(self, labels: dict[str, str], nodes: Sequence[str]) -> str | None:
        return node_of(labels.get(self._label, ""), nodes, self._node_re)

    def _collect(self, nodes: Sequence[str], start: float, end: float) -> tuple[list[evidence.Finding], set[str]]:
        window = f"{max(1, math.ceil(end - start))}s"
        findings: list[evidence.Finding] = []
        seen: set[str] = set()

        # The Xid gauge: which GPUs changed value in the window (and which nodes have series at all).
        changed: list[tuple[str, dict[str, str]]] = []
        for row in self._query(f"changes({self._selector(XID, nodes)}[{window}])", end):
            node = self._node_of(row.get("metric", {}), nodes)
            if node is None:
                continue
            seen.add(node)
            if float(row["value"][1]) > 0:
                changed.append((node, row["metric"]))
        for node, labels in changed:
            findings.extend(self._xid_findings(node, labels, nodes, (window, start, end)))

        for spec in COUNTERS:
            sel = self._selector(spec.metric, nodes)
            for row in self._query(f"max_over_time({sel}[{window}]) - min_over_time({sel}[{window}])", end):
                node = self._node_of(row.get("metric", {}), nodes)
                increase = float(row["value"][1])
                if node is None or not increase > 0:
                    continue
                gpu = _gpu(row["metric"])
                findings.append(evidence.Finding(
                    source=SOURCE, node=node, signal=spec.metric, category=spec.category, fault=spec.fault,
                    value=increase, gpu=gpu,
                    text=f"{node} GPU {gpu}: {spec.what} rose by {increase:g} during the attempt ({spec.metric})",
                ))

        for row in self._query(f"last_over_time({self._selector(THROTTLE, nodes)}[{window}])", end):
            node = self._node_of(row.get("metric", {}), nodes)
            mask = int(float(row["value"][1]))
            bits = [name for bit, name in THROTTLE_HW_BITS.items() if mask & bit]
            if node is None or not bits:
                continue
            gpu = _gpu(row["metric"])
            findings.append(evidence.Finding(
                source=SOURCE, node=node, signal=THROTTLE, category=vocab.Category.NONE, fault=False,
                value=mask, gpu=gpu, text=f"{node} GPU {gpu}: clocks throttled ({', '.join(bits)}; mask {mask:#x})",
            ))
        return findings, seen

    def _xid_findings(self, node: str, labels: dict[str, str], nodes: Sequence[str],
                      span: tuple[str, float, float]) -> list[evidence.Finding]:
        """Each new non-zero Xid value of one GPU inside the window, with when it was first scraped."""
        window, start, end = span
        gpu = _gpu(labels)
        sel = self._selector(XID, nodes)
        if gpu is not None:
            sel = sel[:-1] + f',gpu="{gpu}"}}'
        out: list[evidence.Finding] = []
        for row in self._query(f"{sel}[{window}]", end):
            if self._node_of(row.get("metric", {}), nodes) != node or _gpu(row["metric"]) != gpu:
                continue
            previous: float | None = None
            for at_raw, value_raw in row.get("values", []):
                at, value = float(at_raw), float(value_raw)
                if previous is not None and value not in (previous, 0) and at >= start:
                    xid = int(value)
                    hardware = xid in HARDWARE_XIDS
                    kind = "hardware/recovery event" if hardware else "not a hardware Xid by itself"
                    out.append(evidence.Finding(
                        source=SOURCE, node=node, signal=XID, category=vocab.Category.GPU_XID_HARDWARE,
                        fault=hardware, value=xid, gpu=gpu, at=at,
                        text=f"{node} GPU {gpu}: Xid {xid} reported by DCGM during the attempt ({kind})",
                    ))
                previous = value
        return out


def _gpu(labels: dict[str, str]) -> int | None:
    raw = labels.get("gpu")
    return int(raw) if raw is not None and raw.isdigit() else None
