"""The CLI scheduler's decisions ("already done", JobGone, refusals) over a scripted Runner.

The Runner is our own Protocol (``schedulers.runner.Runner``); the answers it gives are the
messages Slurm 22.05 printed on the local cluster for the same situations.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from trainguard.schedulers import base, runner, slurm_local

DATA = Path(__file__).parent / "data"
NODES = (DATA / "scontrol-show-node-22.05.txt").read_text()
JOBS = (DATA / "scontrol-show-job-22.05.txt").read_text().splitlines()


class ScriptedRunner:
    """Answers by argv prefix; records every argv it was asked to run."""

    def __init__(self, answers: dict[tuple[str, ...], tuple[int, str, str]]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, ...]] = []
        self.stats = runner.CallStats()

    async def run(self, argv: Sequence[str]) -> runner.CommandResult:
        self.calls.append(tuple(argv))
        for prefix, (rc, out, err) in sorted(self.answers.items(), key=lambda kv: -len(kv[0])):
            if tuple(argv[: len(prefix)]) == prefix:
                return runner.CommandResult(tuple(argv), rc, out, err)
        raise AssertionError(f"unexpected command {argv}")

    async def close(self) -> None:
        return None


def scheduler(answers: dict[tuple[str, ...], tuple[int, str, str]]) -> tuple[slurm_local.SlurmCommandScheduler,
                                                                             ScriptedRunner]:
    base_answers = {
        ("scontrol", "--version"): (0, "slurm-wlm 22.05.8\n", ""),
        ("scontrol", "-o", "show", "node"): (0, NODES, ""),
    }
    r = ScriptedRunner({**base_answers, **answers})
    return slurm_local.SlurmCommandScheduler(r, cluster="trainguard"), r


def job_line(job_id: str) -> str:
    return next(x for x in JOBS if x.startswith(f"JobId={job_id} "))


async def test_requeue_of_pending_job_is_success() -> None:
    s, r = scheduler({("scontrol", "requeue"): (1, "", "Job is pending execution for job 5\n")})
    await s.requeue("5")
    assert r.calls == [("scontrol", "requeue", "5")]


async def test_requeue_hold_of_pending_job_holds_it() -> None:
    s, r = scheduler({
        ("scontrol", "requeuehold"): (1, "", "Job is pending execution for job 5\n"),
        ("scontrol", "hold"): (0, "", ""),
    })
    await s.requeue_hold("5")
    assert r.calls[-1] == ("scontrol", "hold", "5")


async def test_invalid_job_id_is_job_gone() -> None:
    s, _ = scheduler({("scontrol", "requeue"): (1, "", "Invalid job id specified for job 999\n")})
    with pytest.raises(base.JobGone):
        await s.requeue("999")


async def test_release_of_finished_job_is_success_but_hold_is_not() -> None:
    msg = "Job has already finished for job 4\nslurm_suspend error: Job has already finished\n"
    s, _ = scheduler({("scontrol", "release"): (1, "", msg), ("scontrol", "hold"): (1, "", msg)})
    await s.release("4")
    with pytest.raises(base.SchedulerError, match="already finished"):
        await s.hold("4")


async def test_get_job_picks_the_array_task() -> None:
    s, _ = scheduler({("scontrol", "-o", "show", "job", "2_2"): (0, job_line("2") + "\n", "")})
    snap = await s.get_job("2_2")
    assert snap.job_id == "2_2" and snap.array_task_id == "2" and snap.nodes == ["node2"]


async def test_exclude_merges_and_validates() -> None:
    s, r = scheduler({
        ("scontrol", "-o", "show", "job", "5"): (0, job_line("5") + "\n", ""),
        ("scontrol", "update", "JobId=5"): (0, "", ""),
    })
    await s.exclude_nodes("5", ["node2", "node4"])
    assert r.calls[-1] == ("scontrol", "update", "JobId=5", "ExcNodeList=node4,node2")
    with pytest.raises(base.SchedulerError, match="unknown node"):
        await s.exclude_nodes("5", ["node9"])
    calls = len(r.calls)
    await s.exclude_nodes("5", ["node4"])  # already excluded: nothing to change
    assert not any(c[:2] == ("scontrol", "update") for c in r.calls[calls:])


async def test_exclude_refuses_running_job() -> None:
    s, _ = scheduler({("scontrol", "-o", "show", "job", "3"): (0, job_line("3") + "\n", "")})
    with pytest.raises(base.SchedulerError, match="pending"):
        await s.exclude_nodes("3", ["node4"])


async def test_resume_only_our_drain() -> None:
    foreign = NODES.replace("Reason=trainguard: xid 79 on GPU 3", "Reason=admin maintenance")
    s, r = scheduler({("scontrol", "update", "NodeName=node4"): (0, "", "")})
    await s.resume_node("node4")
    assert r.calls[-1] == ("scontrol", "update", "NodeName=node4", "State=RESUME")
    await s.resume_node("node1")  # not drained: nothing to do
    assert r.calls[-1][:4] == ("scontrol", "-o", "show", "node")
    s2, r2 = scheduler({("scontrol", "-o", "show", "node"): (0, foreign, "")})
    with pytest.raises(base.SchedulerError, match="not ours"):
        await s2.resume_node("node4")
    assert not any(c[1] == "update" for c in r2.calls)


async def test_drain_of_drained_node_changes_nothing() -> None:
    s, r = scheduler({("scontrol", "update", "NodeName=node1"): (0, "", "")})
    await s.drain_node("node4", "again")
    assert not any(c[1] == "update" for c in r.calls)
    await s.drain_node("node1", "xid 79")
    assert r.calls[-1] == ("scontrol", "update", "NodeName=node1", "State=DRAIN", "Reason=trainguard: xid 79")


async def test_list_jobs_keeps_only_opted_in() -> None:
    s, _ = scheduler({("squeue", "--json", "--states=all"): (0, (DATA / "squeue-22.05.json").read_text(), "")})
    jobs = await s.list_jobs()
    assert sorted(j.job_id for j in jobs) == ["1", "2_1", "2_2", "4", "5"]  # 3 has comment "other"


async def test_list_jobs_reports_bad_json_clearly() -> None:
    s, _ = scheduler({("squeue", "--json", "--states=all"): (0, "squeue: error: Invalid user\n", "")})
    with pytest.raises(base.SchedulerError, match="no JSON"):
        await s.list_jobs()
