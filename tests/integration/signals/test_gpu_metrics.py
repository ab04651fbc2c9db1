"""signals.gpu_metrics against a real Prometheus and a real VictoriaMetrics scraping DCGM-style exporters.

Each test changes the exporters' values (one exporter per node), waits until both servers have
scraped them, and asks the query module for the window; the same assertions hold on both
servers, since both answer the Prometheus query API.
"""

from __future__ import annotations

import time

import pytest

from tests.support.prometheus import GpuTelemetry
from trainguard.model import evidence, vocab
from trainguard.signals import gpu_metrics

pytestmark = [pytest.mark.integration, pytest.mark.prometheus, pytest.mark.timeout(300)]

SERVERS = ("prometheus", "victoria-metrics")


def source(telemetry: GpuTelemetry, server: str, **kwargs: object) -> gpu_metrics.GpuMetrics:
    return gpu_metrics.GpuMetrics(gpu_metrics.GpuMetricsConfig(url=telemetry.url(server), **kwargs))  # type: ignore[arg-type]


async def test_an_xid_raised_during_the_window_is_a_fault_on_that_node_and_gpu(gpu_telemetry: GpuTelemetry) -> None:
    start = time.time()
    gpu_telemetry.wait_scraped_after(start, "node2", gpu=1)
    gpu_telemetry.exporters["node2"].set(1, gpu_metrics.XID, 79)
    gpu_telemetry.wait_all("node2", gpu_metrics.XID, 1, 79)
    for server in SERVERS:
        got = await source(gpu_telemetry, server).window(["node1", "node2"], start, time.time())
        assert got.sources == [evidence.SourceStatus(name="prometheus", state=evidence.SourceState.USED)], server
        xids = [f for f in got.findings if f.signal == gpu_metrics.XID]
        assert [(f.node, f.gpu, f.value, f.fault) for f in xids] == [("node2", 1, 79, True)], server
        assert xids[0].category == vocab.Category.GPU_XID_HARDWARE
        assert xids[0].at is not None and xids[0].at >= start
        assert got.faults() == xids, server


async def test_an_xid_left_from_before_the_window_is_not_this_attempts(gpu_telemetry: GpuTelemetry) -> None:
    gpu_telemetry.exporters["node3"].set(0, gpu_metrics.XID, 48)
    gpu_telemetry.wait_all("node3", gpu_metrics.XID, 0, 48)
    start = time.time()
    gpu_telemetry.wait_scraped_after(start, "node3", gpu=0)
    for server in SERVERS:
        got = await source(gpu_telemetry, server).window(["node3"], start, time.time())
        assert got.sources[0].state == evidence.SourceState.USED, server
        assert got.findings == [], server


async def test_counters_that_rose_are_findings_faults_only_for_uncorrectable_errors(
    gpu_telemetry: GpuTelemetry,
) -> None:
    node1 = gpu_telemetry.exporters["node1"]
    start = time.time()
    gpu_telemetry.wait_scraped_after(start, "node1", gpu=0)
    node1.add(0, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 2)
    node1.add(1, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", 5)
    node1.set(1, gpu_metrics.ROW_REMAP_FAILURE, 1)
    node1.add(0, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", 7)
    node1.set(0, gpu_metrics.THROTTLE, 0x8 | 0x1)
    gpu_telemetry.wait_all("node1", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 0, 2)
    gpu_telemetry.wait_all("node1", gpu_metrics.THROTTLE, 0, 9)
    gpu_telemetry.wait_all("node1", gpu_metrics.ROW_REMAP_FAILURE, 1, 1)
    gpu_telemetry.wait_all("node1", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", 1, 5)
    gpu_telemetry.wait_all("node1", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", 0, 7)
    for server in SERVERS:
        got = await source(gpu_telemetry, server).window(["node1"], start, time.time())
        table = {(f.signal, f.gpu): (f.value, f.fault) for f in got.findings}
        assert table == {
            ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 0): (2, True),
            (gpu_metrics.ROW_REMAP_FAILURE, 1): (1, True),
            ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", 1): (5, False),
            ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", 0): (7, False),
            (gpu_metrics.THROTTLE, 0): (9, False),
        }, server
        throttle = next(f for f in got.findings if f.signal == gpu_metrics.THROTTLE)
        assert "HW slowdown" in throttle.text


async def test_nodes_without_series_are_named_and_no_series_at_all_is_unavailable(
    gpu_telemetry: GpuTelemetry,
) -> None:
    now = time.time()
    for server in SERVERS:
        partial = await source(gpu_telemetry, server).window(["node4", "gpu-less"], now - 30, now)
        assert partial.sources[0].state == evidence.SourceState.USED, server
        assert "no DCGM series for gpu-less" in partial.sources[0].reason
        none = await source(gpu_telemetry, server).window(["gpu-less"], now - 30, now)
        assert none.sources[0].state == evidence.SourceState.UNAVAILABLE, server
        assert "no DCGM series" in none.sources[0].reason and "Hostname" in none.sources[0].reason
        wrong_label = await source(gpu_telemetry, server, hostname_label="instance_host").window(
            ["node4"], now - 30, now)
        assert wrong_label.sources[0].state == evidence.SourceState.UNAVAILABLE, server
        assert "instance_host" in wrong_label.sources[0].reason


async def test_label_values_map_to_scheduler_node_names(gpu_telemetry: GpuTelemetry) -> None:
    fqdn = "gpu-node5.cluster.example"
    start = time.time()
    gpu_telemetry.wait_scraped_after(start, fqdn, gpu=0)
    gpu_telemetry.exporters[fqdn].set(0, gpu_metrics.XID, 94)
    gpu_telemetry.wait_all(fqdn, gpu_metrics.XID, 0, 94)
    for server in SERVERS:
        # by default the part before the first dot is the node name
        short = await source(gpu_telemetry, server).window(["gpu-node5"], start, time.time())
        assert [(f.node, f.value) for f in short.findings] == [("gpu-node5", 94)], server
        # a regex maps the exporter's host name to a differently named scheduler node
        metrics = source(gpu_telemetry, server, node_regex=r"^gpu-(node\d+)\.")
        got = await metrics.window(["node5"], start, time.time())
        assert [(f.node, f.value) for f in got.findings] == [("node5", 94)], server


async def test_an_unreachable_server_is_unavailable_with_the_reason_not_an_exception() -> None:
    metrics = gpu_metrics.GpuMetrics(gpu_metrics.GpuMetricsConfig(url="http://127.0.0.1:9", timeout_s=2))
    got = await metrics.window(["node1"], time.time() - 60, time.time())
    assert got.findings == []
    assert got.sources[0].state == evidence.SourceState.UNAVAILABLE
    assert "127.0.0.1:9" in got.sources[0].reason


def test_a_hostname_label_that_is_not_a_label_name_is_refused() -> None:
    with pytest.raises(ValueError, match="label"):
        gpu_metrics.GpuMetrics(gpu_metrics.GpuMetricsConfig(url="http://x", hostname_label='a"}'))
