"""The effects of our own actions are not failures, on the real local Slurm cluster.

When Trainguard requeues a job that is still running (here: a 2-node job hung in a collective),
Slurm terminates the attempt's tasks and the job output fills with kill lines
(``slurmstepd: error: *** STEP 12.0 ON node1 CANCELLED AT ... DUE TO JOB REQUEUE ***``,
``srun: error: node2: task 1: Terminated``, ``srun: Job step aborted``). Those lines are what our
requeue did, so they must be recorded as evidence of that action, not as a new
``process_signal_killed`` anomaly of the attempt (with its verdict, its suspect nodes entering
lemon-node memory, and possibly an advice). Before the fix the hung attempt got a second anomaly
from the teardown our own requeue caused.

The counter-check runs at the same time: a real ``kill -9`` of a rank of a healthy job, which
nobody asked for, is still a crash anomaly that gets the job requeued.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import harness
from tests.e2e.conftest import StartTrainguard
from tests.support.slurm import SlurmCluster

pytestmark = [pytest.mark.e2e, pytest.mark.slurm]

TIMEOUT = 300.0
"""Submit -> final state with one requeue, on two shared CPU cores."""


@pytest.fixture(scope="module")
def jobs(
    slurm_cluster: SlurmCluster, start_trainguard: StartTrainguard, e2e_dir: Path
) -> Iterator[tuple[harness.Trainguard, Path, dict[str, str], harness.KillPlan, threading.Thread]]:
    runner, policy = start_trainguard("action", "own-actions")
    workdir = e2e_dir / "jobs"
    opt_in = f"trainguard policy={policy}"
    common: dict[str, Any] = {"nodes": 2, "step_time": 0.1, "log_every": 5, "ckpt_every": 20}
    ids: dict[str, str] = {}
    try:
        ids["hang"] = harness.submit(slurm_cluster, workdir, job_name="own-hang", steps=80, fault="hang",
                                     fault_rank=1, fault_step=25, comment=f"{opt_in} hang-timeout=20s", **common)
        ids["kill9"] = harness.submit(slurm_cluster, workdir, job_name="own-kill9", steps=150, comment=opt_in,
                                      **common)
        kill = harness.KillPlan(ids["kill9"], workdir)
        thread = threading.Thread(target=kill.run, name="kill-9", daemon=True)
        thread.start()
        yield runner, workdir, ids, kill, thread
    finally:
        for job_id in ids.values():
            harness.cancel_if_active(slurm_cluster, job_id)


def _completed_after_a_requeue(cluster: SlurmCluster, runner: harness.Trainguard, workdir: Path,
                                 job_id: str) -> list[dict[str, Any]]:
    job = harness.wait_job(cluster, job_id, harness.final_and_restarted(1), timeout=TIMEOUT,
                           what="final after a requeue", runner=runner, workdir=workdir)
    # Restarts may exceed 1 when attempt 1 hits the known rendezvous-port collision with another
    # cluster's job (EADDRINUSE); only attempt 0 is checked here.
    assert job["JobState"] == "COMPLETED", harness.diagnosis(runner, workdir, job_id)
    return harness.wait_audit(runner, job_id, lambda rs: bool(harness.of_kind(rs, "outcome", 0)), timeout=60,
                              what="outcome of attempt 0")


@pytest.mark.slow(
    reason="a real requeue whose teardown lines must be read and judged, and the next attempt run to its end")
def test_kill_lines_caused_by_our_requeue_are_evidence_of_it_not_a_new_anomaly(
    slurm_cluster: SlurmCluster,
    jobs: tuple[harness.Trainguard, Path, dict[str, str], harness.KillPlan, threading.Thread],
) -> None:
    runner, workdir, ids, _kill, _thread = jobs
    records = _completed_after_a_requeue(slurm_cluster, runner, workdir, ids["hang"])
    output = harness.output(workdir, ids["hang"])
    assert "DUE TO JOB REQUEUE" in output, "our requeue did not terminate running tasks: the scenario proves nothing"
    # The teardown lines reach the runner within a tailing round; wait until they are on record.
    records = harness.wait_audit(
        runner, ids["hang"],
        lambda rs: any(r["payload"].get("status") == "effect" for r in harness.of_kind(rs, "action", 0)),
        timeout=60, what="record of our requeue's effect",
    )
    anomalies = harness.of_kind(records, "anomaly", 0)
    assert [a["payload"]["symptom"] for a in anomalies] == ["hang"], harness.diagnosis(runner, workdir, ids["hang"])
    assert not [a for a in harness.of_kind(records, "anomaly") if a["payload"]["category"] == "process_signal_killed"]
    assert len(harness.of_kind(records, "verdict", 0)) == 1
    assert [a["payload"]["action"] for a in harness.of_kind(records, "advice", 0)] == ["requeue"]
    effects = [r["payload"] for r in harness.of_kind(records, "action", 0) if r["payload"]["status"] == "effect"]
    assert {e["operation"] for e in effects} == {"requeue"}
    assert all(e["effect"]["category"] == "process_signal_killed" for e in effects), effects
    assert any("CANCELLED" in item["text"] or "Terminated" in item["text"]
               for e in effects for item in e["effect"]["evidence"]), effects


def test_a_real_kill_9_of_a_rank_is_still_a_failure(
    slurm_cluster: SlurmCluster,
    jobs: tuple[harness.Trainguard, Path, dict[str, str], harness.KillPlan, threading.Thread],
) -> None:
    runner, workdir, ids, kill, thread = jobs
    thread.join(timeout=harness.START_TIMEOUT * 3)
    assert kill.error == "" and kill.killed_at is not None, kill.error or harness.diagnosis(runner, workdir,
                                                                                            ids["kill9"])
    records = _completed_after_a_requeue(slurm_cluster, runner, workdir, ids["kill9"])
    anomalies = [a["payload"] for a in harness.of_kind(records, "anomaly", 0)]
    assert anomalies and anomalies[0]["symptom"] == "crash", anomalies
    assert anomalies[0]["first_seen_at"] >= kill.killed_at - 1.0
    assert [a["payload"]["action"] for a in harness.of_kind(records, "advice", 0)] == ["requeue"]
    assert not [r for r in harness.of_kind(records, "action") if r["payload"]["status"] == "effect"]
