"""The whole good test setup at once, as an operator would run doctor before `trainguard run`:
the real Slurm cluster through slurmrestd, a migrated audit database, job output shipped to a
real VictoriaLogs, DCGM-style metrics scraped by a real Prometheus. Every check is ok, except
Loki, which is not configured (one log store at a time) and says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import prometheus, slurm
from tests.support.doctor import migrated_sqlite, push_lines, run_doctor, wait_queryable
from tests.support.victorialogs import VictoriaLogsServer

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.victorialogs, pytest.mark.prometheus]


def test_everything_configured_and_good(slurm_cluster: slurm.SlurmCluster, victorialogs: VictoriaLogsServer,
                                        cluster_gpu_telemetry: prometheus.GpuTelemetry, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    push_lines(victorialogs.url, [{"job_id": "77", "host": "node2", "filename": "/jobs/slurm-77.out",
                                   "log": "epoch 1 step 200 loss 0.91"}], "job_id,host,filename")
    wait_queryable(victorialogs.url, 1)
    env = {**slurm_cluster.client_env, "SLURM_JWT": slurm_cluster.jwt,
           "TRAINGUARD_SCHEDULER": "slurm-rest://" + slurm_cluster.rest_url.split("://", 1)[1],
           "TRAINGUARD_DB_URL": migrated_sqlite(tmp_path), "TRAINGUARD_VICTORIALOGS_URL": victorialogs.url,
           "TRAINGUARD_PROMETHEUS_URL": cluster_gpu_telemetry.url("prometheus")}
    run = run_doctor(monkeypatch, env=env)
    assert run.code == 0, run.checks
    not_ok = {c["name"]: c["status"] for c in run.checks if c["status"] != "ok"}
    assert not_ok == {"loki": "warn"}, [c for c in run.checks if c["status"] != "ok"]
    assert [c["name"] for c in run.checks] == [
        "config", "policies", "patterns", "http", "slurmrestd", "scheduler", "slurm.JobRequeue", "slurm.job_comment",
        "database", "database.schema", "database.writable", "victorialogs", "victorialogs.streams",
        "victorialogs.lag", "loki", "prometheus", "prometheus.dcgm", "prometheus.hostnames"]
