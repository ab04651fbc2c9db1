"""End to end on real Slurm with the audit store on MySQL/MariaDB: ``trainguard run --db mysql+aiomysql://``
recovers a hardware crash (Xid 79 on one node) by a requeue without that node, and ``trainguard audit``
reads the whole trail back from the same database (the production path of a MySQL install)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e import harness
from tests.support import mysql
from tests.support.slurm import SlurmCluster, expand_hostlist

pytestmark = [pytest.mark.e2e, pytest.mark.slurm, pytest.mark.mysql]

ISO_MICRO_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00$")
"""The audit contract's time: UTC ISO 8601 with microseconds (DATETIME(6) on MySQL keeps them)."""
RECOVERY_TIMEOUT = 300.0
"""Submit -> completed after one requeue, on two shared CPU cores."""


@pytest.fixture
def mysql_runner(slurm_cluster: SlurmCluster, mysql_server: mysql.MysqlServer,
                 tmp_path: Path) -> Iterator[tuple[harness.Trainguard, str]]:
    with mysql.scratch_database(mysql_server, "tg_e2e") as url:
        policy, name = harness.isolated_policy(tmp_path, spec=harness.NO_LEMONS)
        runner = harness.Trainguard(slurm_cluster, tmp_path / "trainguard", mode="action", policy=policy, db_url=url)
        runner.start()
        try:
            yield runner, name
        finally:
            code = runner.stop()
            print(f"\n--- {runner.log_path} (exit {code}) ---\n{runner.log()}")


def test_hardware_crash_recovered_and_audited_on_mysql(slurm_cluster: SlurmCluster,
                                                       mysql_runner: tuple[harness.Trainguard, str],
                                                       tmp_path: Path) -> None:
    runner, policy = mysql_runner
    workdir = tmp_path / "jobs"
    job_id = harness.submit(slurm_cluster, workdir, job_name="e2e-mysql", nodes=2, step_time=0.1, log_every=5,
                            ckpt_every=20, steps=100, fault="xid", fault_rank=1, fault_step=15,
                            comment=f"trainguard policy={policy}")
    try:
        job = harness.wait_job(slurm_cluster, job_id, harness.final_and_restarted(1), timeout=RECOVERY_TIMEOUT,
                               what="final with Restarts>=1", runner=runner, workdir=workdir)
        text = harness.output(workdir, job_id)
        first = [m for m in harness.BANNER_RE.finditer(text) if m["attempt"] == "0"]
        bad = next(m["node"] for m in first if m["rank"] == "1")
        why = harness.diagnosis(runner, workdir, job_id)
        assert (job["JobState"], job["Restarts"], job["ExitCode"]) == ("COMPLETED", "1", "0:0"), why
        assert bad in expand_hostlist(job["ExcNodeList"]), job

        records = runner.audit(job_id)
        assert all(ISO_MICRO_UTC.match(r["time"]) for r in records), records[:3]
        anomaly = harness.of_kind(records, "anomaly", 0)[0]["payload"]
        assert anomaly["suspect_nodes"] == [bad]
        verdict = harness.of_kind(records, "verdict", 0)[0]["payload"]
        assert (verdict["attribution"], verdict["nodes"]) == ("hardware", [bad])
        advice = harness.of_kind(records, "advice", 0)
        assert len(advice) == 1 and advice[0]["payload"]["exclusions"] == [bad], why
        operations = [r["payload"].get("operation", "") for r in harness.of_kind(records, "action", 0)
                      if r["payload"]["status"] == "done"]
        assert operations == ["requeue_hold", "exclude_nodes", "release"], why
        [outcome] = harness.of_kind(records, "outcome", 0)
        assert outcome["payload"]["disposition"] == "Converged"
    finally:
        harness.cancel_if_active(slurm_cluster, job_id)
