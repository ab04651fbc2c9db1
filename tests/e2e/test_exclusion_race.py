"""The exclusion step of a hardware recovery, at the moment the e2e scenarios hit it: right after requeue-hold.

A job whose processes take a few seconds to die (a rank flushing, a hung collective) stays
``COMPLETING`` (Reason=job_requeued_in_held_state) for up to KillWait after ``scontrol
requeuehold``. Slurm accepts ``scontrol update ExcNodeList`` in that state (checked on 22.05), so
the executor's ``requeue_hold -> exclude_nodes -> release`` must work there too; otherwise the
recovery is abandoned, the hold released, and the job runs again on the bad node (seen in the
hardware scenario of test_slurm_recovery.py and in hack/demo.sh). Drives the product's own Slurm
adapter, as the executor does.

Made deterministic on a loaded machine: the hold comes only once every task has printed that its
SIGTERM trap is set (RUNNING alone does not mean the tasks exist yet: a task killed before its
trap makes the job leave COMPLETING at once); on SIGTERM each task outlives Slurm's KillWait, so
the job stays COMPLETING until slurmctld's SIGKILL, KillWait (5 s) after the hold; and the adapter
has read the cluster name and Slurm version before the hold, so only one ``scontrol`` call falls
into that window.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.e2e import harness
from tests.support.slurm import SlurmCluster, expand_hostlist
from trainguard.model import workloads
from trainguard.schedulers import slurm_local

pytestmark = [pytest.mark.e2e, pytest.mark.slurm]

SLOW_TO_DIE = """#!/bin/bash
#SBATCH --job-name=e2e-slow-to-die
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --requeue
#SBATCH --comment=e2e-not-opted-in
srun -l bash -c 'trap "sleep 60; exit 1" TERM; echo trap set; while :; do sleep 0.2; done'
"""
TASKS = 2


async def test_nodes_can_be_excluded_while_the_requeue_held_job_is_still_completing(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    script = tmp_path / "slow.sh"
    script.write_text(SLOW_TO_DIE)
    env = {k: v for k, v in slurm_cluster.env.items() if k != "SLURM_JWT"}
    proc = await asyncio.create_subprocess_exec("sbatch", "--parsable", f"--chdir={tmp_path}", str(script), env=env,
                                                stdout=asyncio.subprocess.PIPE)
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=30)
    job_id = out.decode().strip().split(";")[0]
    slurm_cluster.submitted.append(job_id)
    scheduler = slurm_local.open_local(env=slurm_cluster.env)
    try:
        running = await asyncio.to_thread(harness.wait_job, slurm_cluster, job_id, harness.running_again(0),
                                          timeout=60, what="RUNNING")
        bad = expand_hostlist(running["NodeList"])[-1]
        await asyncio.to_thread(_wait_for_traps, tmp_path / f"slurm-{job_id}.out")
        assert (await scheduler.get_job(job_id)).state is workloads.JobState.RUNNING  # warms the adapter up
        await scheduler.requeue_hold(job_id)
        held = await scheduler.get_job(job_id)
        assert held.state is workloads.JobState.COMPLETING, f"precondition: still completing, got {held.state}"

        await scheduler.exclude_nodes(job_id, [bad])  # what the executor does next

        pending = await asyncio.to_thread(harness.wait_job, slurm_cluster, job_id,
                                          lambda j: j.get("JobState") == "PENDING", timeout=30, what="PENDING")
        assert expand_hostlist(pending["ExcNodeList"]) == [bad]
        await scheduler.release(job_id)
        again = await asyncio.to_thread(harness.wait_job, slurm_cluster, job_id, harness.running_again(1),
                                        timeout=60, what="RUNNING again")
        assert bad not in expand_hostlist(again["NodeList"])
    finally:
        await scheduler.close()
        harness.cancel_if_active(slurm_cluster, job_id)


def _wait_for_traps(output: Path, timeout: float = 120.0) -> None:
    """Until every task has printed ``trap set`` (srun -l labels each line with its task)."""
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = output.read_text(errors="replace") if output.exists() else ""
        if {line.split(":", 1)[0].strip() for line in text.splitlines() if line.endswith("trap set")} == {
            str(task) for task in range(TASKS)
        }:
            return
        time.sleep(0.2)
    raise AssertionError(f"not every task set its SIGTERM trap within {timeout:.0f} s:\n{text}")
