"""What a scheduler tells us about a workload: a snapshot, read fresh before every action."""

from __future__ import annotations

import enum
from typing import Literal

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
    Priority=0 / requeue-hold); whether the hold is ours is known from our own action rows and
    checked against ``hold_reason``/``hold_detail`` before we release it.
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
    exclusions_while_running: bool = False
    """Whether the scheduler can exclude nodes for this job while it runs, and the exclusion still
    matters then: on Kubernetes it is a cordon + taint of the node, which keeps the workload's next
    restart (its own, e.g. a re-created PyTorchJob Worker) off it. A Slurm ``ExcNodeList`` is set on
    pending jobs only, so a requeued job already running elsewhere needs none."""
    incarnation: str = ""
    """Which object the workload id names now, where the scheduler says (a Kubernetes object's
    ``metadata.uid``; empty for Slurm). A workload deleted and created again under the same name
    has the same id and a new incarnation: its history is not its predecessor's."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Kubernetes labels of a Kubernetes workload (empty for Slurm); ``selector.labels``."""
    stdout_path: str | None = None
    stderr_path: str | None = None
    held: bool = False
    hold_reason: str = ""
    """Slurm's reason code of the hold (``JobHeldUser``, ``JobHeldAdmin``); empty when not held."""
    hold_detail: str = ""
    """Slurm's description of the hold, e.g. ``job requeued in held state`` after ``scontrol
    requeuehold``; a person's ``scontrol hold`` changes the code, a release clears both. With
    ``hold_reason`` it tells whether a hold is still the one we placed."""
    requeue_allowed: bool = True
    num_tasks: int | None = None
    """Tasks of the job (Slurm ``NumTasks``); with ``nodes`` it gives the rank layout."""
    min_nodes: int | None = None
    """The fewest nodes the workload can run on, when the scheduler packs its tasks by their requests
    (a Kubernetes workload's pods); None: it needs as many nodes as it has (Slurm)."""
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


UNUSABLE_NODE_STATES = frozenset({
    "DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "NOT_RESPONDING", "FUTURE", "UNKNOWN",
    "POWERED_DOWN", "POWER_DOWN", "POWERING_DOWN", "POWERING_UP", "INVALID", "INVALID_REG", "REBOOT_ISSUED",
    "REBOOT_REQUESTED", "MAINTENANCE", "MAINT", "BLOCKED",
})
"""Slurm node state words (base state or flag) that keep new work off a node."""

_SINFO_SUFFIXES = {"*": "NOT_RESPONDING", "~": "POWERED_DOWN", "#": "POWERING_UP", "%": "POWERING_DOWN",
                   "!": "POWER_DOWN", "@": "REBOOT_REQUESTED", "^": "REBOOT_ISSUED", "-": "PLANNED", "$": "MAINT"}


class NodeSnapshot(BaseModel):
    """One read of one node. ``reason`` starts with our tag when we drained it."""

    model_config = ConfigDict(frozen=True)

    name: str
    state: str
    reason: str = ""
    partitions: list[str] = Field(default_factory=list)
    drained: bool = False

    @property
    def usable(self) -> bool:
        """Whether the scheduler may start work on the node now: not drained, down, failed,
        powered down, rebooting or otherwise unavailable (``IDLE``, ``MIXED``, ``ALLOCATED``,
        ``COMPLETING`` and the like are usable). ``state`` is Slurm's, words joined by ``+``."""
        if self.drained:
            return False
        words: set[str] = set()
        for raw in self.state.upper().split("+"):
            word = raw.strip()
            while word and word[-1] in _SINFO_SUFFIXES:
                words.add(_SINFO_SUFFIXES[word[-1]])
                word = word[:-1]
            if word:
                words.add(word)
        return bool(words) and not words & UNUSABLE_NODE_STATES


ShardKey = Literal["cluster", "partition", "namespace"]
"""What a workload's shard is derived from (``shards.key_value``): its Slurm cluster, partition or
Kubernetes namespace. Here, below the settings and ``shards``, so both name the one definition."""
