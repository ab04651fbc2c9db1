"""Named steps: how each advice action becomes scheduler operations, and how to see them done.

Place in the loop: used by ``executor`` (plan, run, verify) and ``watchdog`` (release).
Each step has a name that is unique within one advice generation (the action row key),
an operation, and an ``in_effect`` test over a fresh job snapshot, so a restarted executor
can tell from the scheduler's own state whether a step it had begun already took effect
(e.g. the restart count advanced => the requeue happened => do not requeue again).

Plans (Slurm semantics: ``scontrol requeue`` and ``requeuehold`` raise the job's restart count,
``ExcNodeList`` can be updated only while the job is pending, ``release`` clears a hold):
- requeue without exclusions: ``requeue``;
- requeue with exclusions: ``requeue_hold`` -> ``exclude_nodes`` -> ``release`` (ExcNodeList
  can only be changed while the job is pending, and the hold keeps it from starting
  on a bad node before the exclusion is in place);
- requeue of a workload whose restart is a suspend cycle (a Kubernetes workload, ``suspend_cycle``):
  always ``requeue_hold`` -> (``exclude_nodes``) -> ``release``. Its suspend and its resume are then
  two recorded steps: a process that dies between them leaves a ``requeue_hold`` row, so the
  executor resumes the release on restart, or the watchdog releases the hold past the deadline
  (one ``requeue`` step that suspends, waits and resumes would leave it suspended for good: its
  restart count moves at the suspend, so the restarted executor takes the requeue as done);
- hold: ``hold``; stop: ``cancel``;
- plus ``drain_node:<node>`` for each node the advice drains.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from trainguard.act import ports
from trainguard.model import actions, advice, vocab, workloads

DRAIN_REASON = "trainguard: suspect node, drained by recovery"
"""Reason given to drain_node; the adapter adds the ``trainguard:`` tag if missing."""
SUSPEND_CYCLE_PREFIX = advice.KUBERNETES_PREFIX
"""Job ids of the Kubernetes adapter (``k8s/NAMESPACE/KIND/NAME``, ``kubejobs.common.PREFIX``; the form the
composite scheduler routes by). Their restart is a suspend/resume cycle (``suspend_cycle``)."""


def suspend_cycle(job_id: str) -> bool:
    """Whether the job's restart is a suspend then a resume (a Kubernetes workload), not one scheduler
    call (Slurm's ``scontrol requeue``). Decided from the id alone, so a restarted executor plans the
    same steps as the one it follows, before it reads anything."""
    return job_id.startswith(SUSPEND_CYCLE_PREFIX)


@dataclasses.dataclass(frozen=True)
class Observation:
    """A fresh read of what a step looks at: the job, and the nodes when the plan drains any."""

    job: workloads.JobSnapshot
    nodes: dict[str, workloads.NodeSnapshot] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Step:
    """One named scheduler operation of an advice generation."""

    name: str
    operation: actions.Operation
    job_id: str
    nodes: tuple[str, ...] = ()
    baseline_attempt: int = 0

    @property
    def args(self) -> dict[str, Any]:
        """The arguments as recorded in the action row and the audit stream."""
        data: dict[str, Any] = {"job_id": self.job_id}
        if self.operation is actions.Operation.EXCLUDE_NODES:
            data["excluded_nodes"] = list(self.nodes)
        elif self.operation is actions.Operation.DRAIN_NODE:
            data["node"] = self.nodes[0]
            data["reason"] = DRAIN_REASON
        return data

    def in_effect(self, seen: Observation) -> bool:
        """Whether the scheduler already shows this step's effect."""
        job = seen.job
        match self.operation:
            case actions.Operation.REQUEUE | actions.Operation.REQUEUE_HOLD:
                return job.attempt > self.baseline_attempt
            case actions.Operation.EXCLUDE_NODES:
                return set(self.nodes) <= set(job.excluded_nodes)
            case actions.Operation.RELEASE:
                return not job.held
            case actions.Operation.HOLD:
                return job.held
            case actions.Operation.CANCEL:
                return job.state.finished
            case actions.Operation.DRAIN_NODE:
                node = seen.nodes.get(self.nodes[0])
                return node is not None and node.drained
        return False

    async def run(self, scheduler: ports.JobScheduler) -> None:
        """Perform the operation (the adapters treat "already done" as success)."""
        match self.operation:
            case actions.Operation.REQUEUE:
                await scheduler.requeue(self.job_id)
            case actions.Operation.REQUEUE_HOLD:
                await scheduler.requeue_hold(self.job_id, attempt=self.baseline_attempt)
            case actions.Operation.EXCLUDE_NODES:
                await scheduler.exclude_nodes(self.job_id, list(self.nodes))
            case actions.Operation.RELEASE:
                await scheduler.release(self.job_id)
            case actions.Operation.HOLD:
                await scheduler.hold(self.job_id)
            case actions.Operation.CANCEL:
                await scheduler.cancel(self.job_id)
            case actions.Operation.DRAIN_NODE:
                await scheduler.drain_node(self.nodes[0], DRAIN_REASON)


def plan(item: advice.Advice, job_id: str) -> list[Step]:
    """The named steps that bring the scheduler to the advice's desired state, in order."""
    base = item.attempt
    steps: list[Step] = []
    match item.action:
        case vocab.AdviceAction.REQUEUE if item.exclude_nodes or item.release_at is not None or suspend_cycle(job_id):
            # Held while it is changed (exclusions: pending jobs only), until the retry backoff ends, or
            # until a suspend's pods are gone (the resume is its own step: never left suspended).
            steps.append(Step("requeue_hold", actions.Operation.REQUEUE_HOLD, job_id, baseline_attempt=base))
            if item.exclude_nodes:
                steps.append(Step("exclude_nodes", actions.Operation.EXCLUDE_NODES, job_id,
                                  tuple(sorted(set(item.exclude_nodes))), baseline_attempt=base))
            steps.append(Step("release", actions.Operation.RELEASE, job_id, baseline_attempt=base))
        case vocab.AdviceAction.REQUEUE:
            steps.append(Step("requeue", actions.Operation.REQUEUE, job_id, baseline_attempt=base))
        case vocab.AdviceAction.HOLD:
            steps.append(Step("hold", actions.Operation.HOLD, job_id, baseline_attempt=base))
        case vocab.AdviceAction.STOP:
            steps.append(Step("cancel", actions.Operation.CANCEL, job_id, baseline_attempt=base))
        case vocab.AdviceAction.NONE:
            pass
    for node in sorted(set(item.drain_nodes) if item.drain_in_scheduler else ()):
        steps.append(Step(f"drain_node:{node}", actions.Operation.DRAIN_NODE, job_id, (node,), baseline_attempt=base))
    return steps


def unmet(item: advice.Advice, seen: Observation) -> list[str]:
    """Why the desired state does not hold yet; empty when it does (observe/verify)."""
    job = seen.job
    missing: list[str] = []
    match item.action:
        case vocab.AdviceAction.REQUEUE:
            if job.attempt <= item.attempt:
                missing.append(f"restart count still {job.attempt} (advice is for attempt {item.attempt})")
            if job.held:
                missing.append("job is held")
            absent = sorted(set(item.exclude_nodes) - set(job.excluded_nodes))
            # A job already running off the nodes needs no exclusion, unless the exclusion still keeps
            # its next restart off them (``exclusions_while_running``: a Kubernetes node taint).
            running_clear = (job.state is workloads.JobState.RUNNING and not set(job.nodes) & set(item.exclude_nodes)
                             and not job.exclusions_while_running)
            if absent and not running_clear:
                missing.append(f"nodes not excluded: {', '.join(absent)}")
        case vocab.AdviceAction.HOLD:
            if not job.held:
                missing.append(f"job not held (state {job.state.value})")
        case vocab.AdviceAction.STOP:
            if not job.state.finished:
                missing.append(f"job still {job.state.value}")
        case vocab.AdviceAction.NONE:
            pass
    for node in sorted(set(item.drain_nodes) if item.drain_in_scheduler else ()):
        snapshot = seen.nodes.get(node)
        if snapshot is None or not snapshot.drained:
            missing.append(f"node {node} not drained")
    return missing
