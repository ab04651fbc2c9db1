"""Every Scheduler operation against the real local Slurm cluster, through each transport.

slurm-local runs scontrol here; slurm-ssh runs it through a real sshd on loopback; slurm-rest
talks to the cluster's slurmrestd and hands requeue (and, on v0.0.38, exclude/drain) to a
slurm-local fallback. Each wait has a timeout; a requeue takes ~6-8 s to run again.
"""

from __future__ import annotations

import pytest

from tests.support import slurm
from trainguard.model import workloads
from trainguard.schedulers import base

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.timeout(180)]

# SLURM_JWT is in the submitting environment (for slurmrestd); srun would use it to authenticate to
# slurmd, which only knows munge ("auth/jwt plugin not found"), so the job script drops it.
LOOP = "#!/bin/bash\nunset SLURM_JWT\nsrun -l bash -c 'for i in $(seq 600); do echo iteration $i; sleep 1; done'\n"
OPT_IN = "--comment=trainguard policy=test"


def running(cluster: slurm.SlurmCluster, job_id: str, nodes: int = 1) -> dict[str, str]:
    return cluster.wait_for(job_id, lambda j: j.get("JobState") == "RUNNING" and
                            len(slurm.expand_hostlist(j.get("NodeList", ""))) == nodes, timeout=60)


async def test_list_and_read(scheduler: base.Scheduler, slurm_cluster: slurm.SlurmCluster) -> None:
    mine = slurm_cluster.submit(LOOP, OPT_IN, "--nodes=2", "--output=%x-%j.out", "--job-name=tg-read",
                                "--account=tg-routing")
    other = slurm_cluster.submit(LOOP, "--comment=not trainguard")
    try:
        running(slurm_cluster, mine, 2)
        listed = {j.job_id: j for j in await scheduler.list_jobs()}
        assert mine in listed and other not in listed
        job = await scheduler.get_job(mine)
        assert job.state is workloads.JobState.RUNNING and job.attempt == 0 and len(job.nodes) == 2
        assert job.comment == "trainguard policy=test" and job.partition == "debug" and job.requeue_allowed
        assert job.stdout_path == str(slurm_cluster.jobs_dir / f"tg-read-{mine}.out")
        assert listed[mine].stdout_path == job.stdout_path and listed[mine].nodes == job.nodes
        # what policies route on (no accounting database here: any account is accepted, QOS stays unset)
        assert (job.account, listed[mine].account) == ("tg-routing", "tg-routing")
        assert job.user and listed[mine].user == job.user and (job.qos, listed[mine].qos) == ("", "")
        with pytest.raises(base.JobGone):
            await scheduler.get_job("99999999")
    finally:
        slurm_cluster.cancel(mine)
        slurm_cluster.cancel(other)


async def test_requeue_and_cancel(scheduler: base.Scheduler, slurm_cluster: slurm.SlurmCluster) -> None:
    job_id = slurm_cluster.submit(LOOP, OPT_IN, "--nodes=2", "--requeue", "--open-mode=append")
    try:
        running(slurm_cluster, job_id, 2)
        await scheduler.requeue(job_id)
        await scheduler.requeue(job_id)  # pending now: "already done", not an error
        slurm_cluster.wait_for(job_id, lambda j: j.get("Restarts") == "1" and j.get("JobState") == "RUNNING",
                               timeout=60)
        assert (await scheduler.get_job(job_id)).attempt == 1
        await scheduler.cancel(job_id)
        slurm_cluster.wait_for(job_id, "CANCELLED", timeout=30)
        await scheduler.cancel(job_id)  # already cancelled: still success
        await scheduler.release(job_id)  # finished, so not held: success
    finally:
        slurm_cluster.cancel(job_id)


async def test_requeue_hold_exclude_release(scheduler: base.Scheduler, slurm_cluster: slurm.SlurmCluster) -> None:
    job_id = slurm_cluster.submit(LOOP, OPT_IN, "--nodes=2", "--requeue", "--open-mode=append")
    try:
        bad = slurm.expand_hostlist(running(slurm_cluster, job_id, 2)["NodeList"])[0]
        with pytest.raises(base.SchedulerError, match="pending"):
            await scheduler.exclude_nodes(job_id, [bad])  # running: refused, never half-done
        await scheduler.requeue_hold(job_id)
        slurm_cluster.wait_for(job_id, "PENDING", timeout=30)  # COMPLETING for up to KillWait first
        held = await scheduler.get_job(job_id)
        assert held.held and held.state is workloads.JobState.PENDING
        await scheduler.requeue_hold(job_id)  # already pending: stays held, no error
        with pytest.raises(base.SchedulerError, match="unknown node"):
            await scheduler.exclude_nodes(job_id, ["node999"])
        await scheduler.exclude_nodes(job_id, [bad])
        await scheduler.exclude_nodes(job_id, [bad])  # merge: no duplicate
        assert (await scheduler.get_job(job_id)).excluded_nodes == [bad]
        await scheduler.release(job_id)
        await scheduler.release(job_id)  # not held any more: success
        again = running(slurm_cluster, job_id, 2)
        assert bad not in slurm.expand_hostlist(again["NodeList"])
        assert not (await scheduler.get_job(job_id)).held
    finally:
        slurm_cluster.cancel(job_id)


async def test_hold_pending_job(scheduler: base.Scheduler, slurm_cluster: slurm.SlurmCluster) -> None:
    job_id = slurm_cluster.submit(LOOP, OPT_IN, "--begin=now+3600")
    try:
        await scheduler.hold(job_id)
        assert (await scheduler.get_job(job_id)).held
        await scheduler.release(job_id)
        assert not (await scheduler.get_job(job_id)).held
    finally:
        slurm_cluster.cancel(job_id)


async def test_drain_and_resume_only_ours(scheduler: base.Scheduler, slurm_cluster: slurm.SlurmCluster) -> None:
    ours, foreign = slurm_cluster.nodes[-1], slurm_cluster.nodes[-2]
    try:
        await scheduler.drain_node(ours, "xid 79 on GPU 3")
        await scheduler.drain_node(ours, "again")  # already drained: unchanged
        node = {n.name: n for n in await scheduler.list_nodes()}[ours]
        assert node.drained and node.reason == "trainguard: xid 79 on GPU 3"
        await scheduler.resume_node(ours)
        assert not {n.name: n for n in await scheduler.list_nodes()}[ours].drained
        await scheduler.resume_node(ours)  # not drained: nothing to do
        slurm_cluster.scontrol("update", f"NodeName={foreign}", "State=DRAIN", "Reason=admin maintenance")
        with pytest.raises(base.SchedulerError, match="not ours"):
            await scheduler.resume_node(foreign)
        assert {n.name: n for n in await scheduler.list_nodes()}[foreign].drained
    finally:
        drained = {n.name for n in await scheduler.list_nodes() if n.drained}
        for name in sorted({ours, foreign} & drained):
            slurm_cluster.scontrol("update", f"NodeName={name}", "State=RESUME")


async def test_job_array_tasks_are_jobs(scheduler: base.Scheduler, slurm_cluster: slurm.SlurmCluster) -> None:
    array = slurm_cluster.submit(LOOP, OPT_IN, "--array=1-2", "--output=arr-%A_%a.out")
    try:
        slurm_cluster.wait_for(f"{array}_2", "RUNNING", timeout=60)
        slurm_cluster.wait_for(f"{array}_1", "RUNNING", timeout=60)
        listed = {j.job_id for j in await scheduler.list_jobs()}
        assert {f"{array}_1", f"{array}_2"} <= listed
        task = await scheduler.get_job(f"{array}_2")
        assert (task.array_job_id, task.array_task_id) == (array, "2")
        assert task.stdout_path == str(slurm_cluster.jobs_dir / f"arr-{array}_2.out")
        await scheduler.cancel(f"{array}_1")
        slurm_cluster.wait_for(f"{array}_1", "CANCELLED", timeout=30)
        assert (await scheduler.get_job(f"{array}_2")).state is workloads.JobState.RUNNING
    finally:
        slurm_cluster.cancel(array)


async def test_hold_reason_tells_our_requeue_hold_from_a_person_hold(
    scheduler: base.Scheduler, slurm_cluster: slurm.SlurmCluster,
) -> None:
    """What the watchdog compares before a release: the hold's reason code and description."""
    job_id = slurm_cluster.submit(LOOP, OPT_IN, "--requeue")
    try:
        running(slurm_cluster, job_id)
        await scheduler.requeue_hold(job_id)
        ours = await scheduler.get_job(job_id)
        assert (ours.held, ours.hold_reason, ours.hold_detail) == (True, "JobHeldUser", "job requeued in held state")
        slurm_cluster.scontrol("hold", job_id)  # a person, on top of our hold
        theirs = await scheduler.get_job(job_id)
        assert (theirs.held, theirs.hold_reason, theirs.hold_detail) == (
            True, "JobHeldAdmin", "job requeued in held state")
        slurm_cluster.scontrol("release", job_id)
        slurm_cluster.scontrol("hold", job_id)  # released and held again: the description is gone
        again = await scheduler.get_job(job_id)
        assert (again.held, again.hold_reason, again.hold_detail) == (True, "JobHeldAdmin", "")
    finally:
        slurm_cluster.cancel(job_id)
