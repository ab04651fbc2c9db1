"""Advice: the desired state for one attempt of one workload, the executor's input."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from trainguard.model import routing, vocab

KUBERNETES_PREFIX = "k8s/"
"""Workload and job ids of the Kubernetes adapter (``k8s/NAMESPACE/KIND/NAME``): their exclusions are a
cordon plus a taint of each node, for every workload of the cluster, not a job's own list."""


class Advice(BaseModel):
    """What should happen next to (workload, attempt), generation ``generation``.

    The executor keys everything on (workload, attempt, generation): a restarted process
    re-reads the scheduler and never repeats an action that already took effect.
    ``deadline`` (epoch seconds) is when the watchdog gives up and releases the workload
    to the scheduler's default behaviour.
    """

    model_config = ConfigDict(frozen=True)

    workload: str
    attempt: int
    generation: int = Field(ge=1)
    action: vocab.AdviceAction
    exclude_nodes: list[str] = Field(default_factory=list)
    drain_nodes: list[str] = Field(default_factory=list)
    drain_in_scheduler: bool = True
    """Whether ``drain_nodes`` are drained in the scheduler (the policy allows ``drainNode``); False
    when only ``cordonNode`` is allowed: the Kubernetes shell cordons them and Slurm is not touched."""
    reasons: list[str] = Field(default_factory=list)
    mode: vocab.Mode = vocab.Mode.MONITOR
    deadline: float | None = None
    release_at: float | None = None
    """For a requeue under a retry backoff: the job is requeued held and released no earlier than
    this (epoch seconds). None: released at once."""
    decided_by: vocab.Decider = vocab.Decider.POLICY_ENGINE
    policy: str = ""
    route: routing.Route | None = None
    """How the workload was routed to ``policy`` (``policy.loader.PolicySet.route``)."""

    @property
    def nodes_taken_out(self) -> list[str]:
        """The nodes this advice takes out of service for everyone: its drains and, on Kubernetes, its
        exclusions (the node limits count them; a Slurm exclusion is the job's own ``ExcNodeList``)."""
        out = set(self.drain_nodes)
        if self.workload.startswith(KUBERNETES_PREFIX):
            out |= set(self.exclude_nodes)
        return sorted(out)
