"""Job discovery over a scripted listing (a fake of our own JobLister Protocol)."""

from __future__ import annotations

import pytest

from trainguard.model import clock, workloads
from trainguard.signals import discovery

S = workloads.JobState


def job(
    job_id: str, state: S = S.RUNNING, attempt: int = 0, nodes: tuple[str, ...] = ("node1",)
) -> workloads.JobSnapshot:
    return workloads.JobSnapshot(workload=f"slurm/t/{job_id}", job_id=job_id, state=state, attempt=attempt,
                                 nodes=list(nodes), comment="trainguard")


class Listing:
    def __init__(self) -> None:
        self.jobs: list[workloads.JobSnapshot] = []
        self.fail = False

    async def list_jobs(self) -> list[workloads.JobSnapshot]:
        if self.fail:
            raise RuntimeError("slurmctld down")
        return list(self.jobs)


def ids(snaps: tuple[workloads.JobSnapshot, ...]) -> list[str]:
    return [s.job_id for s in snaps]


async def test_lifecycle_new_changed_requeued_finished_forgotten_gone() -> None:
    c = clock.ManualClock()
    lst = Listing()
    d = discovery.JobDiscovery(lst, c)
    lst.jobs = [job("1", S.PENDING, nodes=())]
    delta = await d.poll()
    assert ids(delta.new) == ["1"] and delta.at == c.now()
    assert (await d.poll()).empty
    lst.jobs = [job("1", S.RUNNING, nodes=("node1", "node2"))]
    delta = await d.poll()
    assert ids(delta.changed) == ["1"] and not delta.restarted
    lst.jobs = [job("1", S.PENDING, attempt=1, nodes=())]  # requeued
    delta = await d.poll()
    assert ids(delta.changed) == ids(delta.restarted) == ["1"]
    lst.jobs = [job("1", S.FAILED, attempt=1)]
    delta = await d.poll()
    assert ids(delta.finished) == ["1"]
    assert (await d.poll()).empty  # reported once per attempt
    d.forget("1")
    assert (await d.poll()).empty and "1" not in d.tracked  # still listed (MinJobAge), but forgotten
    lst.jobs = [job("1", S.PENDING, attempt=2, nodes=())]  # requeued after we let go: a new run
    delta = await d.poll()
    assert ids(delta.new) == ["1"]
    lst.jobs = []
    delta = await d.poll()
    assert ids(delta.gone) == ["1"] and not d.tracked


async def test_first_seen_finished_is_new_and_finished() -> None:
    lst = Listing()
    lst.jobs = [job("7", S.COMPLETED), job("8_2", S.RUNNING)]
    d = discovery.JobDiscovery(lst, clock.ManualClock())
    delta = await d.poll()
    assert ids(delta.new) == ["7", "8_2"] and ids(delta.finished) == ["7"]


async def test_scheduler_failure_leaves_state_alone() -> None:
    lst = Listing()
    lst.jobs = [job("1")]
    d = discovery.JobDiscovery(lst, clock.ManualClock())
    await d.poll()
    lst.fail = True
    with pytest.raises(RuntimeError):
        await d.poll()
    lst.fail = False
    assert (await d.poll()).empty and list(d.tracked) == ["1"]


def test_compare_is_pure_over_state() -> None:
    state = discovery.DiscoveryState()
    first = discovery.compare(state, [job("1")], 10.0)
    assert ids(first.new) == ["1"] and state.jobs["1"].first_seen == 10.0
    again = discovery.compare(state, [job("1", nodes=("node3",))], 11.0)
    assert ids(again.changed) == ["1"] and state.jobs["1"].first_seen == 10.0


async def test_a_new_object_under_a_forgotten_id_is_a_new_job() -> None:
    """A JobSet deleted and created again under its name (a new uid) while the old one was still
    listed as forgotten: the newcomer is reported, though its attempt is not above the forgotten one."""
    c = clock.ManualClock()
    lst = Listing()
    d = discovery.JobDiscovery(lst, c)
    lst.jobs = [job("1").model_copy(update={"incarnation": "uid-a", "state": S.FAILED})]
    await d.poll()
    d.forget("1")
    assert (await d.poll()).empty  # the forgotten run stays silent
    lst.jobs = [job("1").model_copy(update={"incarnation": "uid-b"})]
    assert ids((await d.poll()).new) == ["1"]
    # and a tracked job whose object changed under it is reported as changed
    lst.jobs = [job("1").model_copy(update={"incarnation": "uid-c"})]
    assert ids((await d.poll()).changed) == ["1"]
