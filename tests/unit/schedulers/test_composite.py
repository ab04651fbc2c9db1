"""One engine over several schedulers (``--scheduler slurm-local --scheduler kubernetes``): every
call reaches the scheduler that owns the job or the node, and never another one."""

from __future__ import annotations

import json

import pytest

from tests.support import fake_scheduler
from trainguard.cli import main
from trainguard.model import workloads
from trainguard.schedulers import base, composite


def job(job_id: str) -> workloads.JobSnapshot:
    return workloads.JobSnapshot(workload=f"w/{job_id}", job_id=job_id, state=workloads.JobState.RUNNING,
                                 comment="trainguard", nodes=["n1"])


async def test_calls_reach_the_owner_of_the_job_or_node_only() -> None:
    slurm = fake_scheduler.FakeScheduler([job("42")], ["node1"])
    kube = fake_scheduler.FakeScheduler([job("k8s/ml/JobSet/train")], ["kwok-node-2"])
    kube.name = "kubernetes"
    both = composite.CompositeScheduler([slurm, kube])
    assert both.name == "fake+kubernetes"
    assert {j.job_id for j in await both.list_jobs()} == {"42", "k8s/ml/JobSet/train"}
    await both.cancel("k8s/ml/JobSet/train")
    await both.requeue("42")
    await both.drain_node("kwok-node-2", "trainguard: suspect")
    assert [c[0] for c in kube.mutating_calls()] == ["cancel", "drain_node"]
    assert [c[0] for c in slurm.mutating_calls()] == ["requeue"]
    assert {n.name for n in await both.list_nodes()} == {"node1", "kwok-node-2"}
    with pytest.raises(base.JobGone):
        await both.get_job("7")
    with pytest.raises(base.SchedulerError, match="knows node"):
        await both.resume_node("elsewhere")


async def test_one_schedulers_outage_does_not_hide_the_others_jobs() -> None:
    slurm = fake_scheduler.FakeScheduler([job("42")], ["node1"])
    kube = fake_scheduler.FakeScheduler([job("k8s/ml/JobSet/train")], [])
    slurm.fail["list_jobs"] = base.SchedulerError("slurmctld down")
    both = composite.CompositeScheduler([slurm, kube])
    assert [j.job_id for j in await both.list_jobs()] == ["k8s/ml/JobSet/train"]
    kube.fail["list_jobs"] = base.SchedulerError("apiserver down")
    with pytest.raises(base.SchedulerError):
        await both.list_jobs()


def test_operator_scheduler_is_repeatable(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert main.main(["operator", "--scheduler", "slurm-local", "--scheduler", "kubernetes", "--print-config"]) == 0
    assert json.loads(capsys.readouterr().out)["settings"]["scheduler"]["value"] == ["slurm-local", "kubernetes"]
    monkeypatch.setenv("TRAINGUARD_SCHEDULER", "kubernetes")
    assert main.main(["operator", "--print-config"]) == 0
    assert json.loads(capsys.readouterr().out)["settings"]["scheduler"]["value"] == ["kubernetes"]
