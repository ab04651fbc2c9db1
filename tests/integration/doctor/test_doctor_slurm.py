"""`trainguard doctor` against the real local Slurm cluster (slurm-local and slurm-rest), a second
cluster with JobRequeue=0, and SQLite audit databases (PostgreSQL: test_doctor_postgres.py).

Each deliberately broken setting must be NAMED by a failed check; the good setup exits 0."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import slurm
from tests.support.doctor import AccountingCluster, BrokenCluster, migrated_sqlite, run_doctor
from trainguard.store import database

pytestmark = [pytest.mark.integration]


def _rest_spec(cluster: slurm.SlurmCluster) -> str:
    return "slurm-rest://" + cluster.rest_url.split("://", 1)[1]


@pytest.mark.slurm
def test_good_slurm_local_setup_passes(slurm_cluster: slurm.SlurmCluster, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    url = migrated_sqlite(tmp_path)
    run = run_doctor(monkeypatch, "--scheduler", "slurm-local", "--db", url, env=slurm_cluster.client_env)
    assert run.code == 0, run.checks
    assert run.failed() == []
    assert run.status("scheduler") == "ok"
    assert all(node in run.check("scheduler")["message"] for node in slurm_cluster.nodes)
    assert run.status("slurm.JobRequeue") == "ok"
    assert run.status("slurm.job_comment") == "ok"
    assert [run.status(n) for n in ("database", "database.schema", "database.writable")] == ["ok"] * 3
    # what is not configured is said, as a warning
    assert run.status("victorialogs") == "warn" and "not configured" in run.check("victorialogs")["message"]


@pytest.mark.slurm
def test_good_slurm_rest_setup_reports_version_and_token(slurm_cluster: slurm.SlurmCluster, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    url = migrated_sqlite(tmp_path)
    run = run_doctor(monkeypatch, "--scheduler", _rest_spec(slurm_cluster), "--db", url,
                     env={**slurm_cluster.client_env, "SLURM_JWT": slurm_cluster.jwt})
    assert run.code == 0, run.checks
    rest = run.check("slurmrestd")
    assert rest["status"] == "ok"
    assert slurm_cluster.version in rest["message"] and slurm_cluster.spoken_api_version in rest["message"]
    # read through the CLI fallback: slurmrestd does not show slurmctld's configuration
    assert run.status("slurm.JobRequeue") == "ok"


@pytest.mark.slurm
def test_names_a_rejected_slurm_jwt(slurm_cluster: slurm.SlurmCluster, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    run = run_doctor(monkeypatch, "--scheduler", _rest_spec(slurm_cluster), "--db", migrated_sqlite(tmp_path),
                     env={**slurm_cluster.client_env, "SLURM_JWT": "not-a-token"})
    assert run.code == 1
    assert run.failed() == ["slurmrestd"]
    assert "JWT" in run.check("slurmrestd")["fix"]


@pytest.mark.slurm
def test_names_a_wrong_slurmrestd_port(slurm_cluster: slurm.SlurmCluster, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    run = run_doctor(monkeypatch, "--scheduler", "slurm-rest://127.0.0.1:9", "--db", migrated_sqlite(tmp_path),
                     env={**slurm_cluster.client_env, "SLURM_JWT": slurm_cluster.jwt})
    assert run.code == 1
    assert run.failed() == ["slurmrestd"]
    assert "127.0.0.1:9" in run.check("slurmrestd")["message"]


@pytest.mark.slurm
def test_names_a_cluster_without_job_requeue(slurm_cluster_without_requeue: BrokenCluster, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    run = run_doctor(monkeypatch, "--scheduler", "slurm-local", "--db", migrated_sqlite(tmp_path),
                     env=slurm_cluster_without_requeue.env)
    assert run.code == 1
    assert run.failed() == ["slurm.JobRequeue"]
    assert "JobRequeue=0" in run.check("slurm.JobRequeue")["message"]
    assert run.status("scheduler") == "ok"


@pytest.mark.slurm
def test_names_a_scheduler_that_does_not_answer(slurm_cluster: slurm.SlurmCluster, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    conf = tmp_path / "slurm.conf"  # the same cluster's configuration, with a port no slurmctld listens on
    text = Path(slurm_cluster.env["SLURM_CONF"]).read_text()
    port = next(line for line in text.splitlines() if line.startswith("SlurmctldPort="))
    conf.write_text(text.replace(port, "SlurmctldPort=9"))
    run = run_doctor(monkeypatch, "--scheduler", "slurm-local", "--db", migrated_sqlite(tmp_path),
                     env={**slurm_cluster.client_env, "SLURM_CONF": str(conf)})
    assert run.code == 1
    assert run.failed() == ["scheduler"]


def test_sqlite_database_states(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No file yet (a warning: run creates it), a file that is not a database, a folder that cannot exist."""
    missing = run_doctor(monkeypatch, "--db", f"sqlite+aiosqlite:///{tmp_path / 'new' / 'audit.db'}")
    assert missing.code == 0 and missing.status("database") == "warn"
    assert not (tmp_path / "new").exists(), "doctor must not create anything"
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not an SQLite database" * 100)
    broken = run_doctor(monkeypatch, "--db", f"sqlite+aiosqlite:///{junk}")
    assert broken.code == 1 and broken.failed() == ["database"]
    blocker = tmp_path / "file"
    blocker.write_text("")
    impossible = run_doctor(monkeypatch, "--db", f"sqlite+aiosqlite:///{blocker / 'audit.db'}")
    assert impossible.code == 1 and impossible.failed() == ["database"]


def test_sqlite_schema_revision(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = migrated_sqlite(tmp_path)
    assert run_doctor(monkeypatch, "--db", url).status("database.schema") == "ok"

    async def pretend_newer() -> None:
        engine = database.make_engine(database.normalise_url(url))
        async with engine.begin() as conn:
            await conn.exec_driver_sql("UPDATE alembic_version SET version_num = '9999'")
        await engine.dispose()

    asyncio.run(pretend_newer())
    run = run_doctor(monkeypatch, "--db", url)
    assert run.code == 1 and run.failed() == ["database.schema"]
    assert "9999" in run.check("database.schema")["message"]


@pytest.mark.slurm
def test_console_script_prints_one_json_object(slurm_cluster: slurm.SlurmCluster, tmp_path: Path) -> None:
    """The contract, from outside: ``trainguard doctor --format json`` and its exit code."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINGUARD_", "SLURM_"))}
    env.update(slurm_cluster.client_env)
    env["TRAINGUARD_DB_URL"] = migrated_sqlite(tmp_path)
    env["TRAINGUARD_SCHEDULER"] = "slurm-local"
    proc = subprocess.run([sys.executable, "-m", "trainguard.cli.main", "doctor", "--format", "json"], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert {c["name"] for c in report["checks"]} >= {"scheduler", "slurm.JobRequeue", "database"}
    env["TRAINGUARD_DB_URL"] = "postgresql+asyncpg://nobody@127.0.0.1:9/none"
    table = subprocess.run([sys.executable, "-m", "trainguard.cli.main", "doctor"], env=env,
                           capture_output=True, text=True, timeout=120, check=False)
    assert table.returncode == 1
    assert any(line.startswith("FAIL") and "database" in line for line in table.stdout.splitlines())


@pytest.mark.slurm
@pytest.mark.mysql
def test_names_accounting_without_job_comment(slurm_cluster_with_accounting: AccountingCluster, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """slurmctld storing accounting in a real slurmdbd: without job_comment the opt-in comment is
    dropped from accounting (a warning naming AccountingStoreFlags); with it, ok."""
    cluster = slurm_cluster_with_accounting
    db = migrated_sqlite(tmp_path)
    cluster.configure("job_env")
    run = run_doctor(monkeypatch, "--scheduler", "slurm-local", "--db", db, env=cluster.env)
    check = run.check("slurm.job_comment")
    assert check["status"] == "warn", run.checks
    assert "accounting_storage/slurmdbd" in check["message"] and "AccountingStoreFlags=job_env" in check["message"]
    assert "job_comment" in check["fix"]
    cluster.configure("job_comment,job_env")
    run = run_doctor(monkeypatch, "--scheduler", "slurm-local", "--db", db, env=cluster.env)
    assert run.status("slurm.job_comment") == "ok", run.checks
    assert run.code == 0
