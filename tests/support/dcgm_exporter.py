"""A small DCGM-exporter-style exporter: per-GPU series with DCGM's metric and label names.

Real GPU clusters publish GPU health through NVIDIA's dcgm-exporter, one per node, scraped by
Prometheus or VictoriaMetrics. This machine has no GPU, so the tests run this exporter instead:
a real ``prometheus_client`` HTTP server whose values the test sets, scraped by real servers.
The names follow dcgm-exporter's counters file (``DCGM_FI_DEV_XID_ERRORS`` is a gauge holding
the last Xid; the ECC, NVLink and PCIe fields are counters without ``_total``; labels ``gpu``,
``UUID``, ``device``, ``modelName``, ``Hostname``). One exporter stands for one node.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

GAUGES = {
    "DCGM_FI_DEV_XID_ERRORS": "Value of the last XID error encountered.",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "Whether remapping of rows has failed",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": "Current clock throttle reasons (bitmask).",
    "DCGM_FI_DEV_GPU_TEMP": "GPU temperature (in C).",
}
COUNTERS = {
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": "Total number of single-bit volatile ECC errors.",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "Total number of double-bit volatile ECC errors.",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": "Total number of NVLink flow-control CRC errors.",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": "Total number of NVLink retries.",
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": "Total number of NVLink recovery errors.",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "Total number of PCIe retries.",
}


class _Collector(Collector):
    def __init__(self, exporter: DcgmExporter) -> None:
        self.exporter = exporter

    def collect(self) -> Iterator[Metric]:
        ex = self.exporter
        labels = ["gpu", "UUID", "device", "modelName", ex.hostname_label, "DCGM_FI_DRIVER_VERSION"]
        with ex.lock:
            values = {gpu: dict(fields) for gpu, fields in ex.values.items()}
        for name, help_text in {**GAUGES, **COUNTERS}.items():
            # dcgm-exporter's counters carry no ``_total`` suffix (prometheus_client's counter
            # family would add one), so the family is built by hand with the sample named as-is.
            family = Metric(name, help_text, "gauge" if name in GAUGES else "counter")
            for gpu in range(ex.gpus):
                uuid = f"GPU-{ex.hostname}-{gpu:04d}"
                values_of = dict(zip(labels, [str(gpu), uuid, f"nvidia{gpu}", "NVIDIA H100 80GB HBM3",
                                              ex.hostname, "550.54.15"], strict=True))
                family.add_sample(name, values_of, values.get(gpu, {}).get(name, 0.0))
            yield family


class DcgmExporter:
    """One node's exporter on ``127.0.0.1:port``; ``set(gpu, metric, value)`` changes what it serves."""

    def __init__(self, hostname: str, *, gpus: int = 2, hostname_label: str = "Hostname") -> None:
        self.hostname = hostname
        self.gpus = gpus
        self.hostname_label = hostname_label
        self.lock = threading.Lock()
        self.values: dict[int, dict[str, float]] = {}
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self))
        self.server: WSGIServer | None = None
        self.thread: threading.Thread | None = None
        self.port = 0

    def start(self) -> DcgmExporter:
        self.server, self.thread = start_http_server(0, addr="127.0.0.1", registry=self.registry)
        self.port = self.server.server_port
        return self

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def set(self, gpu: int, metric: str, value: float) -> None:
        if metric not in GAUGES and metric not in COUNTERS:
            raise KeyError(metric)
        with self.lock:
            self.values.setdefault(gpu, {})[metric] = float(value)

    def add(self, gpu: int, metric: str, amount: float = 1) -> None:
        """Raise a counter by ``amount``."""
        with self.lock:
            current = self.values.get(gpu, {}).get(metric, 0.0)
        self.set(gpu, metric, current + amount)

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        if self.thread is not None:
            self.thread.join(timeout=5)
