"""`trainguard doctor` on a real VictoriaLogs server: lines shipped the way a production shipper
does (``/insert/jsonline``, ``Content-Type: application/stream+json``, stream fields) pass; a
shipper using other field names, a wrong port and a stopped server are each named."""

from __future__ import annotations

import pytest

from tests.support.doctor import push_lines, run_doctor, wait_queryable
from tests.support.victorialogs import VictoriaLogsServer, free_port

pytestmark = [pytest.mark.integration, pytest.mark.victorialogs]

MEMORY_DB = "sqlite+aiosqlite:///:memory:"


def test_good_streams_pass_with_version_sample_and_lag(victorialogs: VictoriaLogsServer,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    push_lines(victorialogs.url, [{"job_id": "4242", "host": "node1", "filename": "/jobs/slurm-4242.out",
                         "log": f"step {i} loss 1.{i}"} for i in range(3)], "job_id,host,filename")
    wait_queryable(victorialogs.url, 3)
    run = run_doctor(monkeypatch, "--victorialogs-url", victorialogs.url, "--db", MEMORY_DB)
    assert run.code == 0, run.checks
    assert run.status("victorialogs") == "ok" and "v1.52.1" in run.check("victorialogs")["message"]
    streams = run.check("victorialogs.streams")
    assert streams["status"] == "ok", streams
    assert 'job_id="4242"' in streams["details"]["sample"]["stream"]
    assert streams["details"]["sample"]["message"].startswith("step ")
    lag = run.check("victorialogs.lag")
    assert lag["status"] == "ok" and 0 <= lag["details"]["lag_s"] < 120


def test_names_streams_without_the_job_field(victorialogs: VictoriaLogsServer,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    push_lines(victorialogs.url, [{"slurm_job": "4242", "host": "node1", "log": "hello"}], "slurm_job,host")
    wait_queryable(victorialogs.url, 1)
    run = run_doctor(monkeypatch, "--victorialogs-url", victorialogs.url, "--db", MEMORY_DB)
    assert run.code == 1 and run.failed() == ["victorialogs.streams"], run.checks
    check = run.check("victorialogs.streams")
    assert "'job_id'" in check["message"] and "slurm_job" in check["message"]
    assert "victorialogs_job_field" in check["fix"]
    # the same store passes once the setting names the shipper's field
    fixed = run_doctor(monkeypatch, "--victorialogs-url", victorialogs.url, "--db", MEMORY_DB,
                       "--victorialogs-job-field", "slurm_job", "--victorialogs-path-field", "log")
    assert fixed.failed() == [], fixed.checks


def test_names_a_wrong_port_and_a_stopped_server(victorialogs: VictoriaLogsServer,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    wrong = f"http://127.0.0.1:{free_port()}"
    run = run_doctor(monkeypatch, "--victorialogs-url", wrong, "--db", MEMORY_DB)
    assert run.code == 1 and run.failed() == ["victorialogs"]
    assert wrong in run.check("victorialogs")["message"]
    victorialogs.stop()
    stopped = run_doctor(monkeypatch, "--victorialogs-url", victorialogs.url, "--db", MEMORY_DB)
    assert stopped.code == 1 and stopped.failed() == ["victorialogs"]


def test_an_empty_store_is_a_warning(victorialogs: VictoriaLogsServer, monkeypatch: pytest.MonkeyPatch) -> None:
    run = run_doctor(monkeypatch, "--victorialogs-url", victorialogs.url, "--db", MEMORY_DB)
    assert run.code == 0 and run.status("victorialogs.streams") == "warn"
