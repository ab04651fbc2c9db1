"""`trainguard doctor` on a real Prometheus and a real VictoriaMetrics scraping DCGM-style exporters
(one per node), compared with the real local Slurm cluster's node names: the good setup passes;
a wrong hostname label, exporters whose hostnames are no scheduler node, a wrong port and a
stopped server are each named."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import prometheus, slurm
from tests.support.doctor import run_doctor

pytestmark = [pytest.mark.integration, pytest.mark.prometheus, pytest.mark.slurm]

MEMORY_DB = "sqlite+aiosqlite:///:memory:"


@pytest.mark.parametrize(("server", "kind"), [("prometheus", "Prometheus 2."),
                                              ("victoria-metrics", "VictoriaMetrics v1.151.0")])
def test_good_setup_passes(server: str, kind: str, cluster_gpu_telemetry: prometheus.GpuTelemetry,
                           slurm_cluster: slurm.SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    run = run_doctor(monkeypatch, "--scheduler", "slurm-local", "--prometheus-url", cluster_gpu_telemetry.url(server),
                     "--db", MEMORY_DB, env=slurm_cluster.client_env)
    assert run.code == 0, run.checks
    assert run.status("prometheus") == "ok" and kind in run.check("prometheus")["message"]
    dcgm = run.check("prometheus.dcgm")
    assert dcgm["status"] == "ok", dcgm
    assert sorted(dcgm["details"]["metrics_by_node"]) == slurm_cluster.nodes
    assert "DCGM_FI_DEV_XID_ERRORS" in dcgm["details"]["metrics_by_node"]["node1"]
    hosts = run.check("prometheus.hostnames")
    assert hosts["status"] == "ok" and hosts["details"]["matched"] == slurm_cluster.nodes


def test_names_a_wrong_hostname_label(cluster_gpu_telemetry: prometheus.GpuTelemetry,
                                      slurm_cluster: slurm.SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    run = run_doctor(monkeypatch, "--scheduler", "slurm-local", "--db", MEMORY_DB,
                     "--prometheus-url", cluster_gpu_telemetry.url("prometheus"),
                     "--prometheus-hostname-label", "host", env=slurm_cluster.client_env)
    assert run.code == 1 and run.failed() == ["prometheus.dcgm"]
    check = run.check("prometheus.dcgm")
    assert "'host'" in check["message"] and "Hostname" in check["details"]["labels"]
    assert "prometheus_hostname_label" in check["fix"]


def test_names_hostnames_that_are_no_scheduler_node_a_wrong_port_and_a_stopped_server(
        tmp_path: Path, slurm_cluster: slurm.SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    started = prometheus.start_gpu_telemetry(tmp_path, ["dcgm-exporter-7f9c", "dcgm-exporter-x2b1"],
                                             servers=("prometheus",))
    try:
        url = started.telemetry.url("prometheus")
        run = run_doctor(monkeypatch, "--scheduler", "slurm-local", "--prometheus-url", url, "--db", MEMORY_DB,
                         env=slurm_cluster.client_env)
        assert run.code == 1 and run.failed() == ["prometheus.hostnames"]
        check = run.check("prometheus.hostnames")
        assert "dcgm-exporter-7f9c" in check["message"] and "node1" in check["message"]
        assert check["details"]["nodes_without_dcgm"] == slurm_cluster.nodes

        wrong = f"http://127.0.0.1:{prometheus.free_port()}"
        run = run_doctor(monkeypatch, "--prometheus-url", wrong, "--db", MEMORY_DB)
        assert run.code == 1 and run.failed() == ["prometheus"] and wrong in run.check("prometheus")["message"]
    finally:
        started.stop()
    stopped = run_doctor(monkeypatch, "--prometheus-url", url, "--db", MEMORY_DB)
    assert stopped.code == 1 and stopped.failed() == ["prometheus"]
