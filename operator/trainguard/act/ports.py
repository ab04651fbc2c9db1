"""What the executor and the watchdog need from the scheduler and from the audit store.

Place in the loop: the edge of ``act/``. ``act`` sits in the same layer as ``schedulers``
and ``store`` and may not import them (``.importlinter``), so it states the operations it
uses as Protocols here; ``schedulers.base.Scheduler`` and ``store.audit.AuditStore``
satisfy them structurally and the engine passes the real objects in. The values that
cross (job snapshots, advice, action and outcome records) live in ``model``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from trainguard.model import actions, advice, checks, lifecycle, workloads

logger = logging.getLogger(__name__)


class JobScheduler(Protocol):
    """The part of ``schedulers.base.Scheduler`` recovery acts through (same semantics)."""

    name: str

    async def get_job(self, job_id: str) -> workloads.JobSnapshot: ...

    async def requeue(self, job_id: str) -> None: ...

    async def requeue_hold(self, job_id: str, *, attempt: int | None = None) -> None: ...

    async def hold(self, job_id: str) -> None: ...

    async def release(self, job_id: str) -> None: ...

    async def exclude_nodes(self, job_id: str, nodes: list[str]) -> None: ...

    async def cancel(self, job_id: str) -> None: ...

    async def list_nodes(self) -> list[workloads.NodeSnapshot]: ...

    async def drain_node(self, node: str, reason: str) -> None: ...


class NodeScheduler(Protocol):
    """The node operations ``act.undrain`` needs (``schedulers.base.Scheduler``, same semantics)."""

    name: str

    async def list_nodes(self) -> list[workloads.NodeSnapshot]: ...

    async def resume_node(self, node: str) -> None: ...


@runtime_checkable
class NodeValidator(Protocol):
    """The scheduler operations of a validation before return (``act.validate``); only schedulers that can run
    a check pinned to one node while keeping every other job off it have them (Slurm over its commands:
    ``schedulers.slurm_local``; Kubernetes: ``k8s.kubejobs.node_checks``). Every operation is idempotent: a
    step repeated after a restart finds it done.
    """

    name: str

    async def list_nodes(self) -> list[workloads.NodeSnapshot]: ...

    async def drain_node(self, node: str, reason: str) -> None: ...

    async def resume_node(self, node: str) -> None: ...

    async def reserve_node(self, node: str, minutes: int) -> str:
        """Our reservation of ``node`` from now for ``minutes`` (already there: success); its name."""
        ...

    async def unreserve_node(self, node: str) -> None:
        """Delete our reservation of ``node``; none there is success. Never touches anyone else's."""
        ...

    async def submit_check(self, node: str, command: Sequence[str], *, tag: str, minutes: int, output_dir: str,
                           partition: str | None, image: str | None = None) -> str:
        """Submit the check pinned to ``node`` inside our reservation, named after ``tag`` (one per round of
        validation); the job id. ``partition`` is Slurm's, ``image`` Kubernetes' (the check's container)."""
        ...

    async def find_check(self, tag: str) -> str | None:
        """Our check job named after ``tag``, if one was submitted (a submit cut short by a restart)."""
        ...

    async def check_status(self, job_id: str) -> checks.CheckStatus: ...

    async def cancel_check(self, job_id: str) -> None:
        """Cancel our check job; one that already ended is success."""
        ...


class Ledger(Protocol):
    """The part of ``store.audit.AuditStore`` the executor and watchdog write and read."""

    async def job_id_of(self, workload: str) -> str | None: ...

    async def record_advice(self, item: advice.Advice, *, at: float) -> bool: ...

    async def get_advice(self, workload: str, attempt: int, generation: int) -> advice.Advice | None: ...

    async def pending_advice(self) -> list[advice.Advice]: ...

    async def begin_action(
        self, record: actions.ActionRecord, *, at: float, fence: actions.FenceToken | None = None,
    ) -> actions.ActionRecord: ...

    async def finish_action(
        self, *, workload: str, attempt: int, generation: int, step: str, status: actions.ActionStatus,
        at: float, error: str = "", result: dict[str, Any] | None = None,
    ) -> actions.ActionRecord: ...

    async def actions_for(self, workload: str, attempt: int, generation: int) -> list[actions.ActionRecord]: ...

    async def actions_of(self, workload: str) -> list[actions.ActionRecord]: ...

    async def actions_by_operation(
        self, operations: list[actions.Operation], *, since: float | None = None,
    ) -> list[actions.ActionRecord]: ...

    async def record_outcome(self, outcome: actions.OutcomeRecord) -> actions.OutcomeRecord: ...

    async def node_state(self, node: str) -> lifecycle.Transition | None: ...

    async def node_states(self) -> list[lifecycle.Transition]: ...

    async def node_transitions(self, node: str) -> list[lifecycle.Transition]: ...

    async def advance_node(
        self, node: str, event: lifecycle.NodeEvent, *, at: float, reason: str, workload: str = "",
        attempt: int | None = None, evidence: dict[str, Any] | None = None,
    ) -> lifecycle.Transition | None: ...

    async def decide_node(
        self, node: str, event: lifecycle.NodeEvent, *, by: str, channel: str, at: float, reason: str,
    ) -> lifecycle.Transition: ...

    async def get_outcome(self, workload: str, attempt: int, generation: int) -> actions.OutcomeRecord | None: ...

    async def record_watchdog(
        self, *, workload: str, attempt: int, generation: int, payload: dict[str, object], at: float,
    ) -> None: ...


NodeChanged = Callable[[actions.ActionRecord], Awaitable[None]]
"""Told of each node we took out of service or put back, once done (a ``drain_node`` or ``resume_node``
row of the executor or the undrainer): the operator posts its ``NodeOutOfService`` / ``NodeReturned``
Events from it. It must not raise (``tell_node_change`` logs what it raises)."""
NODE_CHANGES = frozenset({actions.Operation.DRAIN_NODE, actions.Operation.RESUME_NODE})


async def tell_node_change(listener: NodeChanged | None, row: actions.ActionRecord) -> None:
    """Hand ``row`` to ``listener`` if it is a node change carried out; never raises (the change is
    made and recorded; only its report would be lost)."""
    if listener is None or row.operation not in NODE_CHANGES or row.status is not actions.ActionStatus.DONE:
        return
    try:
        await listener(row)
    except Exception:
        logger.exception("reporting %s of %s failed", row.step, row.workload)


class Fence(Protocol):
    """Leadership as the executor and the watchdog see it, consulted before every scheduler mutation.

    The engine knows nothing about how leadership is decided (a Kubernetes Lease, ``k8s/lease.py``);
    it only asks for the token to fence the next mutation with. ``token`` raises
    ``actions.FencedError`` when this instance knows it is no longer the leader; it returns None when
    there is nothing to fence (one standalone instance, ``ALWAYS_LEADER``). ``workload`` is the
    workload the mutation is for: with several shards (``shards.py``) each has its own lease and token.
    """

    def token(self, workload: str = "") -> actions.FenceToken | None: ...


class AlwaysLeader:
    """The fence of a standalone run: one instance, always acting, no token to check."""

    def token(self, workload: str = "") -> actions.FenceToken | None:
        return None


ALWAYS_LEADER: Fence = AlwaysLeader()
