"""The local Slurm cluster (hack/local-slurm.sh) does what the recovery executor relies on.

These are the scheduler operations Trainguard's Slurm adapters issue, run against the real
daemons: requeue of a running multi-node job (it restarts, Restarts counts up, the output file
keeps both runs) and requeue-hold + ExcNodeList + release (it restarts without the excluded
node). If they fail here, the adapters cannot work on this machine either.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.slurm import JobPredicate, SlurmCluster, expand_hostlist

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

# A training-shaped job: one start line per run (with Slurm's restart count), then every rank
# prints labelled progress lines until it is cancelled.
PROGRESS_JOB = """#!/bin/bash
echo "trainguard-test start restarts=${SLURM_RESTART_COUNT:-0} job=$SLURM_JOB_ID nodes=$SLURM_JOB_NODELIST"
srun -l bash -c 'for i in $(seq 1 600); do echo "iteration $i on $SLURMD_NODENAME"; sleep 1; done'
"""

REQUEUE_TIMEOUT = 90.0
"""A requeued job waits cred_expire+1 s (6 s) plus a scheduler pass; 90 s leaves room on a busy host."""


def running_on(count: int) -> JobPredicate:
    def running_on_nodes(job: dict[str, str]) -> bool:
        return job.get("JobState") == "RUNNING" and len(expand_hostlist(job.get("NodeList", ""))) == count

    running_on_nodes.__name__ = f"RUNNING on {count} nodes"
    return running_on_nodes


def restarted(times: int) -> JobPredicate:
    def restarted_and_running(job: dict[str, str]) -> bool:
        return job.get("JobState") == "RUNNING" and job.get("Restarts") == str(times)

    restarted_and_running.__name__ = f"RUNNING with Restarts={times}"
    return restarted_and_running


def pending_held(job: dict[str, str]) -> bool:
    """PENDING and held (Reason job_requeued_in_held_state on 22.05, JobHeld* otherwise)."""
    return job.get("JobState") == "PENDING" and "held" in job.get("Reason", "").lower()


def wait_for_lines(path: Path, needle: str, count: int, timeout: float, cluster: SlurmCluster, job_id: str) -> str:
    """Wait until the job's output file has ``count`` lines containing ``needle``."""
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        if sum(needle in line for line in text.splitlines()) >= count:
            return text
        time.sleep(0.5)
    state = cluster.show(job_id).get("JobState")
    raise AssertionError(f"{path}: fewer than {count} lines with {needle!r} after {timeout} s (job {state}):\n{text}")


def test_requeue_restarts_a_running_two_node_job(slurm_cluster: SlurmCluster) -> None:
    cluster = slurm_cluster
    if len(cluster.nodes) < 2:
        pytest.skip("needs a cluster of at least 2 nodes")
    output = cluster.jobs_dir / "requeue-%j.out"
    job_id = cluster.submit(
        PROGRESS_JOB,
        "--job-name=tg-test-requeue",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--requeue",
        "--open-mode=append",
        f"--output={output}",
    )
    out_path = Path(str(output).replace("%j", job_id))
    try:
        first = cluster.wait_for(job_id, running_on(2), timeout=60)
        assert first["Restarts"] == "0"
        assert first["Requeue"] == "1"
        wait_for_lines(out_path, "iteration", 2, 30, cluster, job_id)

        cluster.scontrol("requeue", job_id)
        second = cluster.wait_for(job_id, restarted(1), timeout=REQUEUE_TIMEOUT)
        assert len(expand_hostlist(second["NodeList"])) == 2

        text = wait_for_lines(out_path, "trainguard-test start", 2, 30, cluster, job_id)
        starts = [line for line in text.splitlines() if line.startswith("trainguard-test start")]
        assert starts[0].startswith("trainguard-test start restarts=0 ")
        assert starts[1].startswith("trainguard-test start restarts=1 ")
        # srun -l labels every progress line with its task id: both ranks reported
        assert {line.split(":", 1)[0].strip() for line in text.splitlines() if "iteration" in line} == {"0", "1"}
    finally:
        cluster.cancel(job_id)
    cancelled = cluster.wait_for(job_id, {"CANCELLED", "COMPLETED", "FAILED"}, timeout=60)
    assert cancelled["JobState"] == "CANCELLED"
    assert cancelled["Restarts"] == "1"


def test_requeuehold_exclude_release_avoids_the_node(slurm_cluster: SlurmCluster) -> None:
    cluster = slurm_cluster
    if len(cluster.nodes) < 2:
        pytest.skip("needs a cluster of at least 2 nodes")
    width = min(2, len(cluster.nodes) - 1)
    job_id = cluster.submit(
        PROGRESS_JOB,
        "--job-name=tg-test-exclude",
        f"--nodes={width}",
        "--ntasks-per-node=1",
        "--requeue",
        "--open-mode=append",
    )
    try:
        first = cluster.wait_for(job_id, running_on(width), timeout=60)
        bad_node = expand_hostlist(first["NodeList"])[0]

        cluster.scontrol("requeuehold", job_id)
        held = cluster.wait_for(job_id, pending_held, timeout=60)
        assert held["Restarts"] == "1"
        assert held["Priority"] == "0"

        cluster.scontrol("update", f"JobId={job_id}", f"ExcNodeList={bad_node}")
        assert cluster.show(job_id)["ExcNodeList"] == bad_node
        cluster.scontrol("release", job_id)

        again = cluster.wait_for(job_id, running_on(width), timeout=REQUEUE_TIMEOUT)
        assert bad_node not in expand_hostlist(again["NodeList"])
        assert again["ExcNodeList"] == bad_node
        assert again["Restarts"] == "1"
    finally:
        cluster.cancel(job_id)
    assert cluster.wait_for(job_id, {"CANCELLED", "COMPLETED", "FAILED"}, timeout=60)["JobState"] == "CANCELLED"
