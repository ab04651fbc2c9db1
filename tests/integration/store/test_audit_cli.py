"""`trainguard audit` against a real database filled by the real executor path (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from tests.support import fake_scheduler
from trainguard.act import executor
from trainguard.cli import main as cli
from trainguard.model import advice, anomalies, clock, verdicts, vocab, workloads
from trainguard.store import database

W, JOB = "slurm/cli/9", "9"
T0 = 1_800_000_000.0
ISO_MICRO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00$")


async def fill(url: str) -> None:
    store = await database.open_store(url)
    try:
        now = clock.ManualClock(T0)
        await store.upsert_workload(workload=W, scheduler="fake", job_id=JOB, at=T0)
        anomaly = anomalies.Anomaly(symptom=vocab.Symptom.CRASH, category=vocab.Category.ECC_MEMORY,
                                    suspect_nodes=["node2"],
                                    evidence=[anomalies.Evidence(line=3, text="uncorrectable ECC error",
                                                                 pattern="cuda.ecc", node="node2")])
        await store.record_anomaly(workload=W, attempt=0, anomaly=anomaly, at=T0)
        verdict = verdicts.Verdict(attribution=vocab.Attribution.HARDWARE, category=vocab.Category.ECC_MEMORY,
                                   suspect_nodes=["node2"])
        await store.record_verdict(workload=W, attempt=0, verdict=verdict, at=T0 + 0.5)
        job = workloads.JobSnapshot(workload=W, job_id=JOB, state=workloads.JobState.FAILED, nodes=["node1", "node2"])
        scheduler = fake_scheduler.FakeScheduler([job], ["node1", "node2", "node3"])
        item = advice.Advice(workload=W, attempt=0, generation=1, action=vocab.AdviceAction.REQUEUE,
                             exclude_nodes=["node2"], mode=vocab.Mode.ACTION, deadline=T0 + 300)
        assert await executor.Executor(scheduler, store, now).reconcile(item) is vocab.Disposition.CONVERGED
    finally:
        await store.close()


def test_audit_json_lines_follow_the_contract(db_url: str, capsys: pytest.CaptureFixture[str]):
    asyncio.run(fill(db_url))

    assert cli.main(["audit", "--db", db_url, "--workload", W, "--format", "json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]

    assert [line["kind"] for line in lines] == ["anomaly", "verdict", "advice"] + ["action"] * 6 + ["outcome"]
    for line in lines:
        assert ISO_MICRO_UTC.match(line["time"]) and line["workload"] == W and line["attempt"] == 0
        assert isinstance(line["payload"], dict)
    anomaly, verdict, advice_line = lines[:3]
    assert (anomaly["payload"]["category"], anomaly["payload"]["suspect_nodes"]) == ("ecc_memory", ["node2"])
    assert anomaly["payload"]["evidence"][0]["text"] == "uncorrectable ECC error"
    assert (verdict["payload"]["attribution"], verdict["payload"]["nodes"]) == ("hardware", ["node2"])
    assert (advice_line["payload"]["action"], advice_line["payload"]["exclusions"]) == ("requeue", ["node2"])
    exclusion = [x for x in lines if x["kind"] == "action" and x["payload"].get("operation", "") == "exclude_nodes"]
    assert exclusion[-1]["payload"]["arguments"]["excluded_nodes"] == ["node2"]
    assert exclusion[-1]["payload"]["status"] == "done"

    assert cli.main(["audit", "--db", db_url, "--kind", "outcome", "--format", "json", "--limit", "1"]) == 0
    (outcome,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert outcome["payload"]["disposition"] == "Converged"

    assert cli.main(["audit", "--db", db_url, "--since", "2099-01-01T00:00:00Z"]) == 0
    assert capsys.readouterr().out == ""

    assert cli.main(["audit", "--db", db_url, "--format", "text", "--kind", "verdict"]) == 0
    assert "hardware" in capsys.readouterr().out


def test_audit_of_a_missing_database_exits_2(db_url: str, capsys: pytest.CaptureFixture[str]):
    assert cli.main(["audit", "--db", db_url, "--format", "json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "trainguard audit:" in captured.err
    assert "Traceback" not in captured.err


def test_audit_without_db_reads_the_database_trainguard_run_was_given(
    db_url: str, tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
):
    """An installation configured by environment (TRAINGUARD_DB_URL, or a URL in a mounted file)
    is read by `trainguard audit` and `trainguard patterns fired` with no --db: the same settings."""
    asyncio.run(fill(db_url))
    monkeypatch.setenv("TRAINGUARD_DB_URL", db_url)
    assert cli.main(["audit", "--workload", W, "--kind", "verdict", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["payload"]["nodes"] == ["node2"]

    monkeypatch.delenv("TRAINGUARD_DB_URL")
    secret = tmp_path / "db-url"
    secret.write_text(db_url + "\n")
    monkeypatch.setenv("TRAINGUARD_DB_URL_FILE", str(secret))
    assert cli.main(["patterns", "fired", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[0])["pattern"] == "cuda.ecc"

    monkeypatch.setenv("TRAINGUARD_DB_URL", db_url)  # both: ambiguous, refused with one line
    assert cli.main(["audit", "--format", "json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "trainguard audit:" in captured.err and "once" in captured.err
