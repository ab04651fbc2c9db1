"""End to end on real Slurm with VictoriaLogs as the engine's only log source.

The job's output file reaches a real VictoriaLogs server the way it does in production: a
shipper (``tests.support.log_shipper``) follows the output files and pushes their lines with
the stream fields ``job_id``, ``host``, ``filename``. The ``trainguard run`` subprocess gets
``TRAINGUARD_VICTORIALOGS_URL`` and so reads job output only from the server (its VictoriaLogs
book has no file access at all); it must detect, attribute and recover as the file-based e2e
(``test_slurm_recovery``) does: a hardware Xid on one node -> requeue excluding that node ->
the job completes on the others.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from tests.e2e import harness
from tests.support import log_shipper
from tests.support.slurm import SlurmCluster, expand_hostlist
from tests.support.victorialogs import VictoriaLogsServer
from tests.workloads import jobs

pytestmark = [pytest.mark.e2e, pytest.mark.slurm, pytest.mark.victorialogs]

RECOVERY_TIMEOUT = 300.0


@pytest.mark.slow(reason="a real recovery whose output reaches the engine only through VictoriaLogs' ingestion")
def test_hardware_crash_read_only_from_victorialogs_is_recovered_without_the_bad_node(
        slurm_cluster: SlurmCluster, victorialogs: VictoriaLogsServer, e2e_dir: Path) -> None:
    directory = e2e_dir / "trainguard-vlogs"
    directory.mkdir(parents=True, exist_ok=True)
    policy, name = harness.isolated_policy(directory, spec=harness.NO_LEMONS)
    env = {**slurm_cluster.env, "TRAINGUARD_VICTORIALOGS_URL": victorialogs.url}
    runner = harness.Trainguard(slurm_cluster, directory, mode="action", policy=policy, env=env)
    workdir = e2e_dir / "jobs-vlogs"
    ids: list[str] = []

    def files() -> list[tuple[str, dict[str, str]]]:
        return [(str(jobs.output_path(workdir, job_id)), {"job_id": job_id}) for job_id in ids]

    with log_shipper.in_thread(victorialogs.url, files):
        runner.start()
        try:
            job_id = harness.submit(slurm_cluster, workdir, job_name="e2e-vlogs", nodes=2, step_time=0.1,
                                    log_every=5, ckpt_every=20, steps=100, fault="xid", fault_rank=1,
                                    fault_step=15, comment=f"trainguard policy={name}")
            ids.append(job_id)
            job = harness.wait_job(slurm_cluster, job_id, harness.final_and_restarted(1), timeout=RECOVERY_TIMEOUT,
                                   what="final with Restarts>=1", runner=runner, workdir=workdir)
            why = harness.diagnosis(runner, workdir, job_id)
            text = harness.output(workdir, job_id)
            first = [m for m in harness.BANNER_RE.finditer(text) if m["attempt"] == "0"]
            bad = next(m["node"] for m in first if m["rank"] == "1")
            assert (job["JobState"], job["Restarts"], job["ExitCode"]) == ("COMPLETED", "1", "0:0"), why
            assert bad in expand_hostlist(job["ExcNodeList"]), job
            assert bad not in expand_hostlist(job["NodeList"]), job

            records = runner.audit(job_id)
            anomaly = harness.of_kind(records, "anomaly", 0)[0]["payload"]
            assert anomaly["symptom"] == "crash"
            assert anomaly["category"] in {"gpu_fallen_off_bus", "gpu_xid_hardware"}, anomaly["category"]
            assert anomaly["suspect_nodes"] == [bad]
            verdict = harness.of_kind(records, "verdict", 0)[0]["payload"]
            assert (verdict["attribution"], verdict["nodes"]) == ("hardware", [bad])
            advice = harness.of_kind(records, "advice", 0)
            assert len(advice) == 1 and advice[0]["payload"]["exclusions"] == [bad], why
            assert not harness.of_kind(records, "advice", 1), "the healthy second attempt is left alone"
            assert "job output is read from VictoriaLogs" in runner.log()
            # the stored read positions are the log store's (row times in ns), not byte offsets of the file
            with contextlib.closing(sqlite3.connect(directory / "audit.db")) as db:
                offsets = [row[0] for row in db.execute(
                    "SELECT byte_offset FROM tail_positions WHERE workload LIKE ?", (f"%{job_id}",))]
            assert offsets and all(o > 10**18 for o in offsets), offsets
        finally:
            for job_id in ids:
                harness.cancel_if_active(slurm_cluster, job_id)
            code = runner.stop()
            if code != 0:
                print(runner.log())
