"""Writes to Node objects: cordon + our ``NoExecute`` taint, and lifting only our own.

Place: the node half of ``KubeScheduler`` (``exclude_nodes``, ``drain_node``, ``resume_node``),
kept apart from the workload half so each stays one responsibility. What a patch contains is
``nodes.py``'s (pure functions); here it is read, computed from that read and applied with a merge
patch that carries the resourceVersion it was computed from, so that a person's or a controller's
change in between (409) is re-read and never overwritten.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from kubernetes_asyncio import client as kclient
from kubernetes_asyncio.client.exceptions import ApiException

from trainguard.k8s import client
from trainguard.k8s.kubejobs import common, nodes
from trainguard.schedulers import base

logger = logging.getLogger(__name__)



class NodeWriter:
    """Excludes and lifts nodes through one CoreV1 API client (see the module docstring)."""

    def __init__(self, core: kclient.CoreV1Api, now: Callable[[], float]) -> None:
        self._core = core
        self._now = now

    async def exclude(self, node: str, workload: str, reason: str) -> None:
        """Cordon ``node`` and put our taint on it (already so: nothing to do)."""
        await self.write(node, lambda obj: nodes.exclude_patch(obj, workload or "trainguard", reason, self._now()),
                         f"cordoned and tainted {nodes.TAINT_KEY}: {reason}", not_done="excluded")

    async def lift(self, node: str) -> None:
        """Lift our exclusion of ``node``; a person's cordon or taint stays."""
        await self.write(node, nodes.lift_patch, "our exclusion lifted", not_done="resumed")

    async def write(self, node: str, patch_of: Callable[[common.Obj], common.Obj | None], what: str, *,
                    not_done: str | None = None, missing_ok: bool = False) -> None:
        """Apply ``patch_of(node)`` computed from a fresh read (None: already so); a 409 re-reads. ``what`` is
        logged once done, ``not_done`` (default ``what``) names it when conflicts win. ``missing_ok``: a node
        that no longer exists is success (nothing left to undo on it)."""
        for _ in range(common.CONFLICT_RETRIES):
            try:
                obj = await self.read(node)
            except base.SchedulerError as exc:
                if missing_ok and isinstance(exc.__cause__, ApiException) and exc.__cause__.status == 404:
                    return
                raise
            patch = patch_of(obj)
            if patch is None:
                return
            if await self._patch(node, patch):
                logger.info("node %s: %s", node, what)
                return
        raise base.SchedulerError(
            f"node {node}: changed concurrently {common.CONFLICT_RETRIES} times; not {not_done or what}")

    async def read(self, node: str) -> common.Obj:
        try:
            data: common.Obj = json.loads(await client.read_body(
                await self._core.read_node(node, _preload_content=False)))
        except ApiException as exc:
            raise base.SchedulerError(f"node {node}: {exc.status} {exc.reason}") from exc
        return data

    async def _patch(self, node: str, patch: common.Obj) -> bool:
        """Apply; False on a 409 (re-read and retry)."""
        try:
            await self._core.patch_node(node, patch, _content_type=common.MERGE)  # type: ignore[call-arg]  # **kwargs option
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise base.SchedulerError(f"node {node}: {exc.status} {exc.reason}: {exc.body!r}") from exc
        return True
