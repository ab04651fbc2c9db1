"""The scheduler interface the executor and job discovery talk to.

Every adapter (slurm-local, slurm-ssh, slurm-rest, JobSet later) implements this
Protocol. Operations are idempotent from the caller's view: an "already done" answer
(requeue of a pending job, release of a job that is not held, drain of a drained node)
is success, not an error. Errors that mean "cannot do this here" raise
``Unsupported``; anything else raises ``SchedulerError`` with the scheduler's message.
"""

from __future__ import annotations

from typing import Final, Protocol, runtime_checkable

from trainguard.model import workloads

OUR_REASON_PREFIX = "trainguard:"
"""Every reason/comment we write starts with this, so we only ever undo our own changes."""


DRAINS: Final = frozenset({"drainNode"})
"""``node_actions`` of a scheduler that drains its own nodes (Slurm; a Kubernetes node's cordon plus taint)."""


def node_actions(scheduler: object) -> frozenset[str]:
    """The policy actions (``actions.allowed`` names) that let this scheduler's ``drain_node`` take a
    node out of service: ``drainNode`` everywhere, and ``cordonNode`` too where a drain *is* a
    Kubernetes cordon (Slinky: ``k8s.slinky_nodes``). A policy that allows neither drains nothing.
    An adapter says so with a ``node_actions`` attribute; without one it drains."""
    return frozenset(getattr(scheduler, "node_actions", DRAINS))


class SchedulerError(RuntimeError):
    """The scheduler refused or failed an operation; the message is the scheduler's."""


class Unsupported(SchedulerError):
    """This transport cannot perform the operation (e.g. requeue over slurmrestd < v0.0.45)."""


class JobGone(SchedulerError):
    """The job no longer exists in the scheduler (purged, or never existed)."""


class Scheduler(Protocol):
    """A batch scheduler, seen through the operations recovery needs."""

    name: str
    """Transport name for logs and the audit trail, e.g. ``slurm-local``."""

    async def list_jobs(self) -> list[workloads.JobSnapshot]:
        """Active and recently finished jobs whose comment opts in (``trainguard ...``)."""
        ...

    async def get_job(self, job_id: str) -> workloads.JobSnapshot:
        """A fresh read of one job; raises JobGone if the scheduler does not know it."""
        ...

    async def requeue(self, job_id: str) -> None: ...

    async def requeue_hold(self, job_id: str, *, attempt: int | None = None) -> None:
        """Requeue and hold, so the job can be changed (e.g. exclusions) before it starts.

        ``attempt``: the attempt the restart is for (the executor's step baseline). An adapter whose
        workloads restart themselves (a PyTorchJob's re-created pod) does nothing when the job is
        already past it: a restart of the workload's own that landed after the executor's last read
        is never doubled. Slurm's own requeue (a node failure with ``--requeue``) is judged before
        each step by ``act.whose``; the Slurm adapters do not read the job again here."""
        ...

    async def hold(self, job_id: str) -> None: ...

    async def release(self, job_id: str) -> None: ...

    async def exclude_nodes(self, job_id: str, nodes: list[str]) -> None:
        """Merge ``nodes`` into the job's excluded nodes. Pending jobs only; known nodes only."""
        ...

    async def cancel(self, job_id: str) -> None: ...

    async def list_nodes(self) -> list[workloads.NodeSnapshot]: ...

    async def drain_node(self, node: str, reason: str) -> None:
        """Drain ``node``; the reason is prefixed with OUR_REASON_PREFIX."""
        ...

    async def resume_node(self, node: str) -> None:
        """Resume ``node`` only if our prefix is on its drain reason; else raise SchedulerError."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class AttemptFloor(Protocol):
    """An adapter whose attempt count lives partly in its own memory (a Kubeflow PyTorchJob: the
    training-operator re-creates a failed pod under its own name, and nothing on the cluster counts
    that restart). After a restart of ours the engine hands it the highest attempt the audit store
    recorded for the job, so the attempt it reports never goes back below one already judged."""

    async def floor_attempt(self, job_id: str, attempt: int) -> None:
        """Report at least ``attempt`` for ``job_id`` from now on (no effect when it already does)."""
        ...
