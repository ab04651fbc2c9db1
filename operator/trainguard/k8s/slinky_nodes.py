"""Slurm on Slinky: a node is taken out of service the way Slinky does it, through the executor.

Place in the loop: a scheduler adapter of the Kubernetes shell, wrapped around the Slurm adapter
when the operator runs with ``--slinky-namespace``. Jobs are Slurm's (every job operation goes to
the Slurm adapter unchanged); nodes are Slinky's. Taking a Slurm node out of service is a cordon
of the Kubernetes node behind its slurmd pod, with Slinky's reason annotation in the same write
(``k8s.slinky``): Slinky then drains the Slurm node itself, and no other pod lands on the node.
Putting it back is our uncordon, only of our own cordon; Slinky then resumes the Slurm node.

Because the cordon is this adapter's ``drain_node``, it is a step of the executor like a Slurm
drain: its intent is committed before the change, fenced, counted by the blast-radius limits and
the admin caps, refused while the switch or the pause says so, resumed by ``undrainAfter``
(``act.undrain``; never when null), undone through the API and the console, and left alone when
a person cordoned or drained the node first. Earlier, the shell cordoned when the advice was
*recorded*, outside all of that.

``list_nodes`` shows Slurm's nodes as the rules need to see them: a node whose Kubernetes node is
cordoned is out of service with the cordon's reason (ours starts with ``trainguard:``; a person's
cordon has theirs, or none), at once, before Slinky's drain reaches Slurm. A node no longer
cordoned shows Slurm's own state: a drain a person made with ``scontrol`` is theirs.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

from kubernetes_asyncio import client as k8s

from trainguard.k8s import client, slinky
from trainguard.model import workloads
from trainguard.schedulers import base

logger = logging.getLogger(__name__)

NODE_ACTIONS: Final = frozenset({"drainNode", "cordonNode"})
"""On Slinky a drain *is* a cordon: a policy that allows either takes a lemon node out of service."""
CORDONED_STATE: Final = "CORDONED"
"""The state shown for a Slurm node whose Kubernetes node is cordoned while Slurm does not show a
drain yet (Slinky drains it within a reconcile)."""


class SlinkyScheduler:
    """The Slurm adapter ``inner`` with Slinky's nodes: drain = cordon, resume = our uncordon."""

    node_actions = NODE_ACTIONS

    def __init__(self, inner: base.Scheduler, api: client.ApiClient, namespace: str) -> None:
        self.inner = inner
        self.name = inner.name
        self._api = api
        self.namespace = namespace
        """The namespace of Slinky's slurmd pods (the map from Slurm node to Kubernetes node)."""

    # ---- jobs: Slurm's, unchanged --------------------------------------------------------------
    async def list_jobs(self) -> list[workloads.JobSnapshot]:
        return await self.inner.list_jobs()

    async def get_job(self, job_id: str) -> workloads.JobSnapshot:
        return await self.inner.get_job(job_id)

    async def requeue(self, job_id: str) -> None:
        await self.inner.requeue(job_id)

    async def requeue_hold(self, job_id: str, *, attempt: int | None = None) -> None:
        await self.inner.requeue_hold(job_id, attempt=attempt)

    async def hold(self, job_id: str) -> None:
        await self.inner.hold(job_id)

    async def release(self, job_id: str) -> None:
        await self.inner.release(job_id)

    async def exclude_nodes(self, job_id: str, nodes: list[str]) -> None:
        await self.inner.exclude_nodes(job_id, nodes)

    async def cancel(self, job_id: str) -> None:
        await self.inner.cancel(job_id)

    async def close(self) -> None:
        await self.inner.close()

    # ---- nodes: Slinky's -------------------------------------------------------------------------
    async def _kube_node(self, slurm_node: str) -> str:
        try:
            placements = await slinky.discover(self._api, self.namespace)
        except client.API_ERRORS as exc:
            raise base.SchedulerError(f"cannot map Slurm node {slurm_node} to its Kubernetes node: "
                                      f"{client.message_of(exc)}") from exc
        placement = placements.get(slurm_node)
        if placement is None or placement.kube_node is None:
            raise base.SchedulerError(f"no slurmd pod of Slurm node {slurm_node} in {self.namespace}: "
                                      "its Kubernetes node is unknown; not cordoned")
        return placement.kube_node

    async def drain_node(self, node: str, reason: str) -> None:
        """Cordon the Kubernetes node behind Slurm node ``node`` with our reason (one write)."""
        text = slinky.cordon_reason(node, reason.removeprefix(base.OUR_REASON_PREFIX).strip())
        await self._change(node, "cordon", lambda kube_node: slinky.cordon(self._api, kube_node, text),
                           "was cordoned by someone else: left alone")

    async def resume_node(self, node: str) -> None:
        """Uncordon, only our own cordon (SchedulerError for anyone else's)."""
        await self._change(node, "uncordon", lambda kube_node: slinky.uncordon(self._api, kube_node),
                           "is cordoned by someone else: not uncordoned")

    async def _change(self, node: str, what: str, call: Callable[[str], Awaitable[slinky.Result]],
                      not_ours: str) -> None:
        """``call`` on the Kubernetes node behind Slurm node ``node``; every failure a SchedulerError
        (the executor's and the undrainer's word for "not done"), someone else's cordon included."""
        kube_node = await self._kube_node(node)
        try:
            result = await call(kube_node)
        except client.API_ERRORS as exc:
            raise base.SchedulerError(f"{what} of {kube_node} (Slurm node {node}) failed: "
                                      f"{client.message_of(exc)}") from exc
        if result is slinky.Result.NOT_OURS:
            raise base.SchedulerError(f"Kubernetes node {kube_node} (Slurm node {node}) {not_ours}")

    async def list_nodes(self) -> list[workloads.NodeSnapshot]:
        """Slurm's nodes, each out of service with its cordon's reason while its Kubernetes node is cordoned."""
        found = await self.inner.list_nodes()
        try:
            placements = await slinky.discover(self._api, self.namespace)
            kube_nodes = {str((n.metadata.name if n.metadata else "") or ""): client.to_dict(self._api, n)
                          for n in (await k8s.CoreV1Api(self._api).list_node()).items or []}
        except client.API_ERRORS as exc:
            raise base.SchedulerError(f"cannot read the Kubernetes nodes behind Slinky's slurmd pods: "
                                      f"{client.message_of(exc)}") from exc
        return [_with_cordon(snapshot, placements, kube_nodes) for snapshot in found]


def _with_cordon(snapshot: workloads.NodeSnapshot, placements: dict[str, slinky.Placement],
                 kube_nodes: dict[str, dict[str, Any]]) -> workloads.NodeSnapshot:
    placement = placements.get(snapshot.name)
    node = kube_nodes.get(placement.kube_node or "") if placement is not None else None
    if node is None or not slinky.is_cordoned(node):
        return snapshot
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    reason = str(annotations.get(slinky.CORDON_REASON_ANNOTATION) or "cordoned in Kubernetes (no reason given)")
    state = snapshot.state if snapshot.drained else f"{snapshot.state}+{CORDONED_STATE}"
    return snapshot.model_copy(update={"drained": True, "reason": reason, "state": state})
