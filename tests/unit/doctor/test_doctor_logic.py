"""The decisions of `trainguard doctor` that need no server: slurmctld's configuration against
the loop's needs, the DCGM hostname label against node names, a log store's fields, the output."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from tests.support.doctor import run_doctor
from trainguard.doctor import logs, metrics, report, slurm
from trainguard.schedulers import slurm_commands

pytestmark = pytest.mark.unit

# The head and a few lines of `scontrol show config` of Slurm 22.05 (the local cluster), as printed.
SHOW_CONFIG = """Configuration data as of 2026-12-01T16:49:53
AccountingStorageBackupHost = (null)
AccountingStorageEnforce = none
AccountingStorageHost   = localhost
AccountingStorageType   = accounting_storage/none
AccountingStoreFlags    = (null)
ClusterName             = trainguard
JobRequeue              = 1
SLURM_VERSION           = 22.05.8

MPI Plugins Configuration:
PMIxCliTmpDirBase       = (null)

Slurmctld(primary) at vm is UP
"""


def by_name(checks: list[report.Check]) -> dict[str, report.Check]:
    return {c.name: c for c in checks}


def test_parse_show_config() -> None:
    config = slurm_commands.parse_show_config(SHOW_CONFIG)
    assert config["JobRequeue"] == "1"
    assert config["AccountingStorageType"] == "accounting_storage/none"
    assert config["SLURM_VERSION"] == "22.05.8"
    assert not any("Slurmctld" in key or "Configuration" in key for key in config)


def test_job_requeue_zero_fails_and_names_the_setting() -> None:
    checks = by_name(slurm.config_checks({"JobRequeue": "0", "AccountingStorageType": "accounting_storage/none"}))
    assert checks["slurm.JobRequeue"].status == "fail"
    assert "JobRequeue=0" in checks["slurm.JobRequeue"].message
    assert "JobRequeue=1" in (checks["slurm.JobRequeue"].fix or "")


@pytest.mark.parametrize(("storage", "flags", "legacy", "status"), [
    ("accounting_storage/none", "(null)", "", "ok"),
    ("accounting_storage/slurmdbd", "(null)", "", "warn"),
    ("accounting_storage/slurmdbd", "job_env,job_script", "", "warn"),
    ("accounting_storage/slurmdbd", "job_comment,job_env", "", "ok"),
    ("accounting_storage/slurmdbd", "", "Yes", "ok"),  # before 21.08: AccountingStoreJobComment
])
def test_job_comment_is_needed_only_with_accounting(storage: str, flags: str, legacy: str, status: str) -> None:
    config = {"JobRequeue": "1", "AccountingStorageType": storage, "AccountingStoreFlags": flags}
    if legacy:
        config["AccountingStoreJobComment"] = legacy
    check = by_name(slurm.config_checks(config))["slurm.job_comment"]
    assert check.status == status
    if status == "warn":
        assert "AccountingStoreFlags" in check.message and "job_comment" in (check.fix or "")


def test_hostname_label_values_against_scheduler_nodes() -> None:
    nodes = ["node1", "node2", "node3"]
    good = metrics.hostnames("h", ["node1", "node2.cluster.local", "node3"], nodes, "Hostname")
    assert good.status == "ok"
    partial = metrics.hostnames("h", ["node1", "gpu-box-9"], nodes, "Hostname")
    assert partial.status == "warn"
    assert "node2, node3" in partial.message and "gpu-box-9" in partial.message
    wrong = metrics.hostnames("h", ["dcgm-exporter-7f9c", "dcgm-exporter-x2b1"], nodes, "Hostname")
    assert wrong.status == "fail" and "prometheus_hostname_label" in (wrong.fix or "")
    unknown = metrics.hostnames("h", ["node1"], None, "Hostname")
    assert unknown.status == "warn"
    pods = ["dcgm-exporter-node1-x7f", "dcgm-exporter-node2-a1b", "dcgm-exporter-node3-k2d"]
    assert metrics.hostnames("h", pods, nodes, "Hostname").status == "fail"
    regex = re.compile(r"dcgm-exporter-(node\d+)-")
    assert metrics.hostnames("h", pods, nodes, "Hostname", regex).status == "ok"


def test_stream_fields() -> None:
    fields = {"job": "job_id", "host": "host", "path": "filename"}
    settings = {"job": "victorialogs_job_field", "host": "victorialogs_host_field", "path": "victorialogs_path_field"}
    now = 1000.0

    def run(rows: list[dict[str, str]]) -> dict[str, report.Check]:
        return by_name(logs.stream_checks("v", rows, fields=fields, settings=settings,
                                          stream_of=lambda r: r.get("_stream", ""), time_of=lambda r: 997.5, now=now))

    full = run([{"_stream": '{job_id="1",host="node1"}', "job_id": "1", "host": "node1", "filename": "/o"}])
    assert full["v.streams"].status == "ok" and full["v.lag"].status == "ok"
    assert full["v.lag"].details == {"lag_s": 2.5}
    no_job = run([{"_stream": '{slurm_job="1"}', "slurm_job": "1", "host": "node1"}])
    assert no_job["v.streams"].status == "fail" and "slurm_job" in no_job["v.streams"].message
    no_host = run([{"job_id": "1", "filename": "/o"}])
    assert no_host["v.streams"].status == "warn" and "victorialogs_host_field" in no_host["v.streams"].message
    assert by_name(logs.stream_checks("v", [], fields=fields, settings=settings, stream_of=str,
                                      time_of=str))["v.streams"].status == "warn"


def test_vm_version_from_own_metrics() -> None:
    text = ('vm_app_version{short_version="v1.52.1", version="victoria-logs-20251001-000000-tags-v1.52.1-0-gabc"} 1\n'
            'vm_app_uptime_seconds 3\n')
    assert logs.vm_version(text) == "v1.52.1"
    assert logs.vm_version("prometheus_build_info{version=\"2.42.0\"} 1\n") is None
    unstamped = ('vm_app_version{version="", short_version=""} 1\n'
                 'vm_log_messages_total{app_version="", level="info", location="/root/go/pkg/mod/github.com/'
                 '!victoria!metrics/!victoria!metrics@v1.146.1-0.2026/lib/httpserver/httpserver.go:152"} 1\n'
                 'vm_log_messages_total{app_version="", level="info", location="/root/go/pkg/mod/github.com/'
                 '!victoria!metrics/!victoria!logs@v1.52.1/app/victoria-logs/main.go:44"} 1\n')
    assert logs.vm_version(unstamped) == "v1.52.1 (unstamped build)"


def test_a_check_that_hangs_is_a_failed_check() -> None:
    async def hang() -> list[report.Check]:
        await asyncio.Event().wait()
        return []

    async def boom() -> list[report.Check]:
        raise RuntimeError("surprise\nsecond line")

    hung = asyncio.run(report.guarded("slow", hang, 0.05))
    assert [(c.name, c.status) for c in hung] == [("slow", "fail")]
    raised = asyncio.run(report.guarded("odd", boom, 5))
    assert raised[0].status == "fail" and raised[0].message == "RuntimeError: surprise; second line"


def test_json_and_table_output() -> None:
    checks = [report.ok("a", "fine"), report.warn("b", "hmm", "do x"), report.fail("c", "broken", "do y", {"k": 1})]
    assert json.loads(report.to_json(checks)) == {"checks": [
        {"name": "a", "status": "ok", "message": "fine"},
        {"name": "b", "status": "warn", "message": "hmm", "fix": "do x"},
        {"name": "c", "status": "fail", "message": "broken", "fix": "do y", "details": {"k": 1}},
    ]}
    table = report.to_table(checks)
    assert "FAIL    c      broken" in table and "fix: do y" in table and "1 ok, 1 warn, 1 fail" in table
    assert report.failed(checks) and not report.failed(checks[:2])


def test_a_bad_setting_is_one_failed_config_check_in_json(monkeypatch: pytest.MonkeyPatch) -> None:
    run = run_doctor(monkeypatch, env={"TRAINGUARD_MODE": "bogus"})
    assert run.code == 1 and run.failed() == ["config"]
    assert "TRAINGUARD_MODE" in run.check("config")["message"]
    both = run_doctor(monkeypatch, "--victorialogs-url", "http://a:9428", "--loki-url", "http://b:3100")
    assert both.failed() == ["config"] and "one log store" in both.check("config")["message"]
    regex = run_doctor(monkeypatch, "--prometheus-url", "http://127.0.0.1:9", "--prometheus-node-regex", "(",
                       "--db", "sqlite+aiosqlite:///:memory:")
    assert "prometheus_node_regex" in regex.check("prometheus")["message"]
