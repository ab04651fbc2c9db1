"""Fixtures of the ``trainguard doctor`` tests: a second real Slurm cluster configured the way the
loop cannot work with (``JobRequeue=0``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import prometheus, services, slurm
from tests.support.doctor import BrokenCluster


@pytest.fixture(scope="session")
def slurm_cluster_without_requeue() -> Iterator[BrokenCluster]:
    """A one-node cluster beside the main one (ports +100, its own state folder) with JobRequeue=0."""
    if os.environ.get("TG_SKIP_SLURM") == "1":
        pytest.skip("TG_SKIP_SLURM=1")
    directory = Path(str(slurm.state_dir()) + "-norequeue")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SLURMRESTD_"))}
    env.update({
        "TG_SLURM_DIR": str(directory), "TG_SLURM_NODES": "1", "TG_SLURM_JOB_REQUEUE": "0",
        "TG_SLURM_CTLD_PORT": str(int(os.environ.get("TG_SLURM_CTLD_PORT", "16817")) + 100),
        "TG_SLURM_NODE_PORT_BASE": str(int(os.environ.get("TG_SLURM_NODE_PORT_BASE", "17000")) + 100),
        "TG_SLURM_REST_PORT": str(int(os.environ.get("TG_SLURM_REST_PORT", "16820")) + 100),
    })
    try:
        with services.shared_service(slurm.SCRIPT, directory, env):
            values = services.read_env_file(directory / "env")
            client = {"SLURM_CONF": values["SLURM_CONF"]}
            if values.get("TG_SLURM_BIN"):
                client["PATH"] = os.environ["PATH"]
            yield BrokenCluster(client)
    except services.ServiceError as exc:
        pytest.fail(f"second local Slurm cluster: {exc}", pytrace=False)


@pytest.fixture(scope="module")
def cluster_gpu_telemetry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[prometheus.GpuTelemetry]:
    """DCGM-style exporters for exactly the local cluster's nodes (node1..node4), scraped by a real
    Prometheus and a real VictoriaMetrics: the good setup."""
    if os.environ.get("TG_SKIP_PROMETHEUS") == "1":
        pytest.skip("TG_SKIP_PROMETHEUS=1")
    started = prometheus.start_gpu_telemetry(tmp_path_factory.mktemp("doctor-gpu"),
                                             [f"node{i}" for i in range(1, 5)])
    try:
        yield started.telemetry
    finally:
        started.stop()
