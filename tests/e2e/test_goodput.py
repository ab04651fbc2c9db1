"""End to end on real Slurm: goodput of a crash -> our requeue -> completion agrees with the audit trail.

One real 2-node PyTorch job saves a checkpoint every 20 steps and crashes on rank 1 at step 30 of
its first attempt; ``trainguard run --mode action`` requeues it and the second attempt resumes and
completes. Then ``trainguard goodput --format json`` (the CLI contract) and ``GET /api/v1/goodput``
of the same runner must split the loss consistently with the audit records' own timestamps: the
detection delay is the anomaly's record time minus its ``first_seen_at``, the decision the advice
minus the anomaly, the action our first requeue step minus the advice; the work lost starts at
the checkpoint line the real job printed.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import harness
from tests.e2e.conftest import StartTrainguard
from tests.support.slurm import SlurmCluster

pytestmark = [pytest.mark.e2e, pytest.mark.slurm]

TIMEOUT = 300.0


def goodput_rows(runner: harness.Trainguard) -> list[dict[str, Any]]:
    proc = subprocess.run([str(harness.TRAINGUARD), "goodput", "--db", runner.db_url, "--format", "json"],
                          env=runner.cluster.env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def test_goodput_of_a_crash_requeue_and_completion(slurm_cluster: SlurmCluster, start_trainguard: StartTrainguard,
                                                   e2e_dir: Path) -> None:
    runner, policy = start_trainguard("action", "goodput")
    workdir = e2e_dir / "jobs"
    job_id = harness.submit(slurm_cluster, workdir, job_name="e2e-goodput", nodes=2, steps=60, step_time=0.1,
                            log_every=5, ckpt_every=20, fault="crash", fault_rank=1, fault_step=30,
                            comment=f"trainguard policy={policy}")
    try:
        job = harness.wait_job(slurm_cluster, job_id, harness.final_and_restarted(1), timeout=TIMEOUT,
                               what="completed after one requeue", runner=runner, workdir=workdir)
        assert (job["JobState"], job["Restarts"]) == ("COMPLETED", "1"), harness.diagnosis(runner, workdir, job_id)

        # the runner records the second attempt's start and end on its next polls: wait for the store
        def completed(rows: list[dict[str, Any]]) -> bool:
            return any(r["workload"].endswith(f"/{job_id}") and r["attempts"] == 2 and r["failures"] == 1
                       and r["requeue_wait_seconds"] > 0 for r in rows)

        rows = goodput_rows(runner)
        deadline = time.monotonic() + 60
        while not completed(rows) and time.monotonic() < deadline:
            time.sleep(1)
            rows = goodput_rows(runner)
        row = next(r for r in rows if r["workload"].endswith(f"/{job_id}"))
        assert completed([row]), row

        records = runner.audit(job_id)
        anomaly = harness.of_kind(records, "anomaly", 0)[0]
        advice = harness.of_kind(records, "advice", 0)[0]
        requeue = next(r for r in harness.of_kind(records, "action", 0)
                       if r["payload"].get("operation", "") in ("requeue", "requeue_hold"))
        detected, advised = harness.parse_time(anomaly["time"]), harness.parse_time(advice["time"])
        onset = float(anomaly["payload"]["first_seen_at"])
        assert row["detection_seconds"] == pytest.approx(detected - onset, abs=1e-5)
        assert row["decision_seconds"] == pytest.approx(advised - detected, abs=1e-5)
        assert row["action_seconds"] == pytest.approx(harness.parse_time(requeue["time"]) - advised, abs=1e-5)
        pieces = ("work_lost_seconds", "detection_seconds", "decision_seconds", "action_seconds",
                  "requeue_wait_seconds")
        assert row["lost_seconds"] == pytest.approx(sum(row[p] for p in pieces), abs=1e-5)
        assert row["mttr_seconds"] == pytest.approx(row["lost_seconds"] - row["work_lost_seconds"], abs=1e-5)
        assert row["estimate"] == ["job_exit"] and row["productive_seconds"] > 0

        with urllib.request.urlopen(runner.http_url + "/api/v1/goodput", timeout=30) as response:
            report = json.load(response)
        failure = next(f for f in report["failures"] if f["workload"].endswith(f"/{job_id}"))
        assert (failure["checkpoint_basis"], failure["requeued_by"], failure["recovered"]) == (
            "checkpoint_line", "trainguard", True)  # the step-20 checkpoint line of the real job
        assert harness.parse_time(failure["onset"]) == pytest.approx(onset, abs=1e-5)
        assert failure["work_lost_seconds"] >= 0  # lines read in one tailing round share their time
    finally:
        harness.cancel_if_active(slurm_cluster, job_id)
