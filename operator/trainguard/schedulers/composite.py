"""Several schedulers seen as one: ``trainguard operator --scheduler slurm-local --scheduler kubernetes``.

The engine drives one ``Scheduler``; this one routes each call to the scheduler that owns the job
(the one that listed it, else the first that knows it) or the node (the first that lists it). Job
ids cannot collide: each adapter's ids carry its own form (Slurm ids are numbers, Kubernetes
workload ids start with ``k8s/``). A scheduler that fails to list does not hide the others' jobs:
its error is logged and its jobs are missing from that round only.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from trainguard.model import workloads
from trainguard.schedulers import base

logger = logging.getLogger(__name__)


class CompositeScheduler:
    """Routes every operation to the child scheduler that owns the job or node."""

    def __init__(self, children: Sequence[base.Scheduler]) -> None:
        if not children:
            raise ValueError("a composite scheduler needs at least one scheduler")
        self.children = tuple(children)
        self.name = "+".join(child.name for child in self.children)
        self._owner: dict[str, base.Scheduler] = {}
        self.node_actions = frozenset().union(*(base.node_actions(child) for child in self.children))
        """Every child's (``base.node_actions``): each drain goes to the child that owns the node."""

    async def list_jobs(self) -> list[workloads.JobSnapshot]:
        found: list[workloads.JobSnapshot] = []
        failures: list[Exception] = []
        for child in self.children:
            try:
                jobs = await child.list_jobs()
            except Exception as exc:  # one scheduler's outage must not hide the others' jobs
                logger.warning("%s: listing jobs failed: %s", child.name, exc)
                failures.append(exc)
                continue
            for job in jobs:
                self._owner[job.job_id] = child
            found.extend(jobs)
        if failures and len(failures) == len(self.children):
            raise failures[0]
        return found

    async def _child_of(self, job_id: str) -> base.Scheduler:
        owner = self._owner.get(job_id)
        if owner is not None:
            return owner
        for child in self.children:
            try:
                await child.get_job(job_id)
            except base.JobGone:
                continue
            except (ValueError, base.SchedulerError):
                continue  # not an id this scheduler understands
            self._owner[job_id] = child
            return child
        raise base.JobGone(f"no scheduler of {self.name} knows job {job_id}")

    async def floor_attempt(self, job_id: str, attempt: int) -> None:
        child = await self._child_of(job_id)
        if isinstance(child, base.AttemptFloor):
            await child.floor_attempt(job_id, attempt)

    async def get_job(self, job_id: str) -> workloads.JobSnapshot:
        return await (await self._child_of(job_id)).get_job(job_id)

    async def requeue(self, job_id: str) -> None:
        await (await self._child_of(job_id)).requeue(job_id)

    async def requeue_hold(self, job_id: str, *, attempt: int | None = None) -> None:
        await (await self._child_of(job_id)).requeue_hold(job_id, attempt=attempt)

    async def hold(self, job_id: str) -> None:
        await (await self._child_of(job_id)).hold(job_id)

    async def release(self, job_id: str) -> None:
        await (await self._child_of(job_id)).release(job_id)

    async def exclude_nodes(self, job_id: str, nodes: list[str]) -> None:
        await (await self._child_of(job_id)).exclude_nodes(job_id, nodes)

    async def cancel(self, job_id: str) -> None:
        await (await self._child_of(job_id)).cancel(job_id)

    async def list_nodes(self) -> list[workloads.NodeSnapshot]:
        found: list[workloads.NodeSnapshot] = []
        for child in self.children:
            try:
                found.extend(await child.list_nodes())
            except Exception as exc:  # as list_jobs: the others' nodes stay visible
                logger.warning("%s: listing nodes failed: %s", child.name, exc)
        return found

    async def _node_owner(self, node: str) -> base.Scheduler:
        for child in self.children:
            if any(n.name == node for n in await child.list_nodes()):
                return child
        raise base.SchedulerError(f"no scheduler of {self.name} knows node {node}")

    async def drain_node(self, node: str, reason: str) -> None:
        await (await self._node_owner(node)).drain_node(node, reason)

    async def resume_node(self, node: str) -> None:
        await (await self._node_owner(node)).resume_node(node)

    async def close(self) -> None:
        for child in self.children:
            try:
                await child.close()
            except Exception as exc:  # close the others anyway
                logger.warning("%s: close failed: %s", child.name, exc)
