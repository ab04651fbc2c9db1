"""What a scheduler tells us about a workload: a snapshot, read fresh before every action."""

from __future__ import annotations

import enum

from pydantic import BaseModel, ConfigDict, Field


class JobState(enum.StrEnum):
    """Scheduler-neutral job state (Slurm's names, which the others map onto)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    COMPLETING = "COMPLETING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    REQUEUED = "REQUEUED"
    UNKNOWN = "UNKNOWN"

    @property
    def finished(self) -> bool:
        return self not in _ACTIVE


_ACTIVE = frozenset(
    {JobState.PENDING, JobState.RUNNING, JobState.SUSPENDED, JobState.COMPLETING, JobState.REQUEUED}
)


class JobSnapshot(BaseModel):
    """One read of one job.

    ``attempt`` is the scheduler's restart count (Slurm ``Restarts``); the identity of a
    run is (workload, attempt). ``held`` is true when the job is held (user or admin,
    Priority=0 / requeue-hold); whether the hold is ours is known from our own action rows.
    """

    model_config = ConfigDict(frozen=True)

    workload: str
    job_id: str
    name: str = ""
    state: JobState
    reason: str = ""
    exit_code: int | None = None
    exit_signal: int | None = None
    attempt: int = 0
    nodes: list[str] = Field(default_factory=list)
    excluded_nodes: list[str] = Field(default_factory=list)
    comment: str = ""
    partition: str = ""
    """Slurm partition; a pending job submitted to several shows them comma-separated (``a,b``)."""
    account: str = ""
    """Slurm account (empty when the cluster has none); policies route on it (``selector.accounts``)."""
    user: str = ""
    """The submitting user's name (Slurm ``UserId``/``user_name``); ``selector.users``."""
    qos: str = ""
    """Slurm quality of service; ``selector.qos``."""
    namespace: str = ""
    """Kubernetes namespace of a Kubernetes workload (empty for Slurm); ``selector.namespaces``."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Kubernetes labels of a Kubernetes workload (empty for Slurm); ``selector.labels``."""
    stdout_path: str | None = None
    stderr_path: str | None = None
    held: bool = False
    requeue_allowed: bool = True
    num_tasks: int | None = None
    """Tasks of the job (Slurm ``NumTasks``); with ``nodes`` it gives the rank layout."""
    array_job_id: str | None = None
    array_task_id: str | None = None
    submitted_at: float | None = None
    started_at: float | None = None
    ended_at: float | None = None


    @property
    def tasks_per_node(self) -> int | None:
        """Tasks per node under an even layout (Slurm's default block distribution), else None."""
        if not self.num_tasks or not self.nodes or self.num_tasks % len(self.nodes):
            return None
        return self.num_tasks // len(self.nodes)


class NodeSnapshot(BaseModel):
    """One read of one node. ``reason`` starts with our tag when we drained it."""

    model_config = ConfigDict(frozen=True)

    name: str
    state: str
    reason: str = ""
    partitions: list[str] = Field(default_factory=list)
    drained: bool = False
