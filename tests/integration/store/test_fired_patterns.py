"""`trainguard patterns fired` and ``AuditStore.fired_patterns``: which catalog entries fired on which
workloads, read from the anomalies the engine recorded (every backend of the store suite)."""

from __future__ import annotations

import asyncio
import json

import pytest

from trainguard.cli import main as cli
from trainguard.model import anomalies, vocab
from trainguard.store import database

T0 = 1_800_000_000.0


def _anomaly(*patterns: str) -> anomalies.Anomaly:
    return anomalies.Anomaly(
        symptom=vocab.Symptom.CRASH,
        category=vocab.Category.NCCL_TIMEOUT,
        evidence=[anomalies.Evidence(line=n + 1, text=f"line {n}", pattern=p) for n, p in enumerate(patterns)],
    )


async def fill(url: str) -> None:
    store = await database.open_store(url)
    try:
        for name in ("slurm/a/1", "slurm/b/2"):
            await store.upsert_workload(workload=name, scheduler="fake", job_id=name[-1], at=T0)
        await store.record_anomaly(
            workload="slurm/a/1", attempt=0, at=T0,
            anomaly=_anomaly("xid.79_fallen_off_bus", "nccl.watchdog_timeout", "nccl.watchdog_timeout"),
        )
        await store.record_anomaly(
            workload="slurm/a/1", attempt=1, at=T0 + 60, anomaly=_anomaly("nccl.watchdog_timeout"),
        )
        await store.record_anomaly(
            workload="slurm/b/2", attempt=0, at=T0 + 3600,
            anomaly=_anomaly("site.lustre_evicted", "nccl.watchdog_timeout"),
        )
    finally:
        await store.close()


def _json(capsys: pytest.CaptureFixture[str]) -> dict[str, dict[str, object]]:
    return {row["pattern"]: row for row in map(json.loads, capsys.readouterr().out.splitlines())}


def test_fired_counts_patterns_per_workload_and_first_cause(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    asyncio.run(fill(db_url))
    assert cli.main(["patterns", "fired", "--db", db_url, "--format", "json"]) == 0
    rows = _json(capsys)
    assert list(rows) == ["nccl.watchdog_timeout", "site.lustre_evicted", "xid.79_fallen_off_bus"]
    watchdog = rows["nccl.watchdog_timeout"]
    assert (watchdog["anomalies"], watchdog["first_cause"]) == (3, 1)  # cited twice in one anomaly: counted once
    assert watchdog["workloads"] == {"slurm/a/1": 2, "slurm/b/2": 1}
    assert watchdog["first"] == "2027-01-15T08:00:00.000000+00:00"
    assert watchdog["last"] == "2027-01-15T09:00:00.000000+00:00"
    site = rows["site.lustre_evicted"]
    assert (site["first_cause"], site["workloads"]) == (1, {"slurm/b/2": 1})


def test_fired_filters_and_table(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    asyncio.run(fill(db_url))
    assert cli.main(["patterns", "fired", "--db", db_url, "--since", "2027-01-15T08:30:00Z", "--format", "json"]) == 0
    assert set(_json(capsys)) == {"nccl.watchdog_timeout", "site.lustre_evicted"}
    assert cli.main(["patterns", "fired", "--db", db_url, "--workload", "slurm/a/1", "--format", "json"]) == 0
    assert set(_json(capsys)) == {"nccl.watchdog_timeout", "xid.79_fallen_off_bus"}
    assert cli.main(["patterns", "fired", "--db", db_url]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["PATTERN", "ANOMALIES", "FIRST-CAUSE", "WORKLOADS"]
    assert table[1].split() == ["nccl.watchdog_timeout", "3", "1", "slurm/a/1", "(2),", "slurm/b/2", "(1)"]


def test_fired_on_a_missing_database_is_a_clear_error(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path}/nothing-here.db"
    assert cli.main(["patterns", "fired", "--db", url]) == 2
    assert "trainguard patterns fired:" in capsys.readouterr().err
