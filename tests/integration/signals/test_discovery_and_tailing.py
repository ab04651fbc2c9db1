"""Discovery and tailing on a real job: first run, requeue (appended output), finish, forget."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.support import slurm
from trainguard.model import clock, workloads
from trainguard.schedulers import factory
from trainguard.signals import discovery, tailer

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.timeout(120)]

SCRIPT = ("#!/bin/bash\nunset SLURM_JWT\necho \"start restart=$SLURM_RESTART_COUNT\"\n"
          "srun -l bash -c 'for i in $(seq 600); do echo iteration $i; sleep 0.5; done'\n")


async def read_until(t: tailer.LogTailer, needle: str, within: float = 30.0) -> list[str]:
    seen: list[str] = []
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        seen += [x.text for x in await t.read_new()]
        if any(needle in s for s in seen):
            return seen
        await asyncio.sleep(0.3)
    raise AssertionError(f"{needle!r} not in output within {within} s; saw {seen[-5:]}")


async def test_follow_a_job_through_a_requeue(slurm_cluster: slurm.SlurmCluster) -> None:
    sched = factory.open_scheduler("slurm-local", env=slurm_cluster.client_env)
    disc = discovery.JobDiscovery(sched, clock.SystemClock())
    job_id = slurm_cluster.submit(SCRIPT, "--comment=trainguard", "--nodes=2", "--requeue", "--open-mode=append")
    try:
        slurm_cluster.wait_for(job_id, "RUNNING", timeout=60)
        delta = await disc.poll()
        job = next(j for j in delta.new if j.job_id == job_id)
        assert job.stdout_path
        tail = tailer.LogTailer(job.stdout_path, clock.SystemClock(), workload=job.workload, source="stdout")
        first = await read_until(tail, "iteration 2")
        assert "start restart=" in first[0]
        await sched.requeue(job_id)
        slurm_cluster.wait_for(job_id, lambda j: j.get("Restarts") == "1" and j.get("JobState") == "RUNNING",
                               timeout=60)
        delta = await disc.poll()
        assert job_id in [j.job_id for j in delta.restarted]
        again = await read_until(tail, "start restart=1")
        assert not any(tailer.MARKER in s for s in again)  # appended, not truncated
        await sched.cancel(job_id)
        slurm_cluster.wait_for(job_id, "CANCELLED", timeout=30)
        delta = await disc.poll()
        assert [j.state for j in delta.finished if j.job_id == job_id] == [workloads.JobState.CANCELLED]
        disc.forget(job_id)
        assert job_id not in {j.job_id for d in [await disc.poll()] for j in d.new + d.changed}
        tail.close()
    finally:
        slurm_cluster.cancel(job_id)
        await sched.close()
