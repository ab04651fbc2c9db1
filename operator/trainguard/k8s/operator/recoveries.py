"""WorkloadRecovery objects: the overrides people write in them, and the status we write.

Place: the operator shell (``shell.Shell.recoveries``), between the engine and the API server:

- one WorkloadRecovery per tracked workload (a Slurm job's in ``workload_namespace``, a JobSet's or
  PyTorchJob's beside it, owned by it), created with its status at once;
- its status is a projection of the engine (``k8s/status.py``), written by the coalescer
  (``k8s/coalesce.py``: the latest state per object, at a bounded rate): an engine record marks its
  workload (``reporting.py``), and the reconcile loop marks every object whose stored status differs
  from the engine's view, every ``status_interval_s`` and at once when woken;
- ``retention_s`` after the engine stopped tracking a workload its object is deleted (only by the
  replica that holds its shard);
- ``spec.overrides`` apply to the workload (``mode: Monitor`` forces Monitor; the budgets and the
  hang timeout become per-workload overrides in the engine), kept across terms.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from kubernetes_asyncio import client as k8s
from pydantic import ValidationError

from trainguard import engine as engine_mod
from trainguard.k8s import client, coalesce, control, recovery, status, status_write
from trainguard.k8s.kubejobs import wiring as kube_wiring
from trainguard.model import actions, vocab

if TYPE_CHECKING:
    from trainguard.k8s.operator.shell import Shell

logger = logging.getLogger("trainguard.operator")


def items_of(listed: Any) -> list[dict[str, Any]]:
    """The objects of a custom-object list answer (a plain dict: the library has no model for CRs)."""
    items = listed.get("items") if isinstance(listed, dict) else None
    return [item for item in items or [] if isinstance(item, dict)]


class Recoveries:
    """The shell's WorkloadRecovery objects: what it knows of them, and the loop that keeps them current."""

    def __init__(self, shell: Shell) -> None:
        self.shell = shell
        self.lock = asyncio.Lock()
        """One create-or-sync at a time (a record's write and the reconcile round may meet)."""
        self.overrides: dict[str, vocab.Mode] = {}
        """Workload -> forced mode from WorkloadRecovery ``spec.overrides.mode`` (kept across terms)."""
        self.policy_overrides: dict[str, dict[str, Any]] = {}
        """Workload -> the other WorkloadRecovery overrides, in the engine's keys (kept across terms)."""
        self.objects: dict[str, dict[str, Any]] = {}
        """WorkloadRecovery name -> the object as last read or created (its uid names it in Events)."""
        self.untracked_since: dict[str, float] = {}
        self.stats = status_write.SyncStats()
        self.coalescer = coalesce.StatusCoalescer()
        """WorkloadRecovery status writes: latest state per object, bounded writes/s (``k8s/coalesce.py``)."""
        self.pause_mirror: control.PauseMirror | None = None
        """The ``trainguard-control`` ConfigMap's pause, mirrored into the store (``k8s/control.py``)."""

    # -------------------------------------------------------------- spec.overrides

    def workload_of(self, body: dict[str, Any]) -> str | None:
        """The engine's workload id a WorkloadRecovery is about: our annotation on the objects we
        create, else its ``spec.workload`` (an object a person created, e.g. to force Monitor before
        the job is seen). An empty ``cluster`` means this operator's only scheduler: the job is
        looked up among the tracked ones by id (None until it is tracked)."""
        workload = ((body.get("metadata") or {}).get("annotations") or {}).get(status.WORKLOAD_ANNOTATION)
        if workload:
            return str(workload)
        ref = (body.get("spec") or {}).get("workload") or {}
        if ref.get("kind") in (recovery.WorkloadKind.JOBSET, recovery.WorkloadKind.PYTORCH_JOB) and ref.get("id"):
            namespace = (body.get("metadata") or {}).get("namespace") or self.shell.config.workload_namespace
            return f"k8s/{namespace}/{ref['kind']}/{ref['id']}"
        if ref.get("kind") != recovery.WorkloadKind.SLURM_JOB or not ref.get("id"):
            return None
        if ref.get("cluster"):
            return f"slurm/{ref['cluster']}/{ref['id']}"
        tracked = self.shell.engine.runtimes if self.shell.engine is not None else {}
        return next((w for w in tracked if w.startswith("slurm/") and w.endswith(f"/{ref['id']}")), None)

    def override_mode(self, body: dict[str, Any], deleted: bool) -> None:
        """A WorkloadRecovery's ``spec.overrides`` apply to its workload: ``mode: Monitor`` forces
        Monitor (Action never raises authority, k8s/recovery.py, so it clears the override); the
        budgets and the hang timeout go to the engine as per-workload overrides."""
        workload = self.workload_of(body)
        if not workload:
            return
        try:
            mode, values = recovery.engine_overrides((body.get("spec") or {}).get("overrides"))
        except ValidationError as exc:  # the CRD schema has the same bounds; only a stale schema gets here
            logger.warning("%s: WorkloadRecovery overrides ignored: %s", workload, exc)
            mode, values = None, {}
        if deleted:
            mode, values = None, {}
        if self.policy_overrides.get(workload, {}) != values:
            if values:
                self.policy_overrides[workload] = values
            else:
                self.policy_overrides.pop(workload, None)
            logger.info("%s: policy overrides %s", workload, values or "cleared")
            if self.shell.engine is not None:
                self.shell.engine.set_workload_overrides(workload, dict(values))
                self.shell.wake.set()
        wanted = mode
        if self.overrides.get(workload) == wanted:
            return
        if wanted is None:
            self.overrides.pop(workload, None)
        else:
            self.overrides[workload] = wanted
        logger.info("%s: mode override %s", workload, wanted or "cleared")
        if self.shell.engine is not None:
            self.shell.engine.set_mode_override(workload, wanted)
            self.shell.wake.set()

    # -------------------------------------------------------------- objects and their status

    async def _view(self, rt: engine_mod.WorkloadRuntime) -> status.WorkloadView:
        steps: list[actions.ActionRecord] = []
        item = rt.last_advice
        if item is not None and self.shell.store is not None:
            steps = await self.shell.store.actions_for(item.workload, item.attempt, item.generation)
        return status.view_of(rt, steps)

    async def object_of(self, rt: engine_mod.WorkloadRuntime) -> dict[str, Any]:
        """The workload's WorkloadRecovery as known (read or created once); its status is written by the
        coalescer (a new object's at once)."""
        name = status.object_name(rt.workload)
        obj = self.objects.get(name)
        if obj is None:
            obj = await self.ensure(rt)
        return obj

    async def write_status(self, workload: str) -> None:
        """The coalescer's write: the workload's status as the engine shows it now (read, compare, patch)."""
        rt = self.shell.engine.runtimes.get(workload) if self.shell.engine is not None else None
        if rt is not None:
            await self.ensure(rt)

    async def ensure(self, rt: engine_mod.WorkloadRuntime, observed: dict[str, Any] | None = None) -> dict[str, Any]:
        """Create the workload's WorkloadRecovery if missing; sync its status; return the object."""
        assert self.shell.api is not None
        view = await self._view(rt)
        namespace = status.namespace_of(view.workload, self.shell.config.workload_namespace)
        name = status.object_name(view.workload)
        owner = None
        kube = kube_wiring.kube_of(self.shell.scheduler)
        if kube is not None:
            owner = kube_wiring.owner_of(kube, view.workload)
            if owner is None and status.kube_workload(view.workload) is not None:
                raise ValueError(f"{view.workload}: uid not known yet; its WorkloadRecovery waits for the watch")
        async with self.lock:
            obj = observed
            if obj is None:
                try:
                    obj = await status_write.get_object(self.shell.api, namespace, name)
                except client.ApiException as exc:
                    if not client.is_not_found(exc):
                        raise
            if obj is None:
                try:
                    obj = dict(await k8s.CustomObjectsApi(self.shell.api).create_namespaced_custom_object(
                        recovery.GROUP, recovery.VERSION, namespace, recovery.PLURAL,
                        status.desired_object(view, namespace, owner)))
                    logger.info("created WorkloadRecovery %s/%s for %s", namespace, name, view.workload)
                except client.ApiException as exc:
                    if not client.is_conflict(exc):  # AlreadyExists: someone (a retry of ours) was first
                        raise
                    obj = await status_write.get_object(self.shell.api, namespace, name)
            await status_write.sync_status(self.shell.api, namespace, name, view, now=self.shell.now(), observed=obj,
                                     stats=self.stats)
            self.untracked_since.pop(name, None)
            self.objects[name] = {"metadata": {k: (obj.get("metadata") or {}).get(k) for k in ("name", "uid")}}
            return obj

    # -------------------------------------------------------------- the reconcile loop

    async def reconcile(self) -> None:
        """One round: every tracked workload has an up-to-date WorkloadRecovery; the ones no longer
        tracked are deleted after the retention; every policy's status is current."""
        if self.shell.engine is None or self.shell.api is None:
            return
        namespace = self.shell.config.workload_namespace
        objects = k8s.CustomObjectsApi(self.shell.api)
        listed = await objects.list_namespaced_custom_object(
            recovery.GROUP, recovery.VERSION, namespace, recovery.PLURAL,
            label_selector=f"{status.MANAGED_BY_LABEL}={status.MANAGED_BY}")
        existing = status.names_of(items_of(listed))
        tracked: set[str] = set()
        for rt in list(self.shell.engine.runtimes.values()):
            try:
                name = status.object_name(rt.workload)
            except ValueError:
                continue  # a workload id no WorkloadRecovery kind describes
            mine = status.namespace_of(rt.workload, namespace) == namespace
            if mine:
                tracked.add(name)
            try:
                if mine and name in existing:
                    if status.differs(await self._view(rt), existing[name], now=self.shell.now()):
                        self.coalescer.mark(rt.workload)  # written by the coalescer, within the write budget
                elif mine or name not in self.objects:
                    await self.ensure(rt)  # a new object: created with its status at once
                else:
                    # A Kubernetes workload's object lives in the workload's namespace, outside the
                    # listing above: the coalescer's write reads it, and patches only a difference.
                    self.coalescer.mark(rt.workload)
            except (client.ApiException, ValueError) as exc:
                logger.warning("WorkloadRecovery %s: %s", name, client.message_of(exc))
        now = self.shell.clock.now()
        for name in set(existing) - tracked:
            if self.shell.ownership is not None and not self.shell.ownership.owns(
                    str(((existing[name].get("metadata") or {}).get("annotations") or {}).get(
                        status.WORKLOAD_ANNOTATION, ""))):
                continue  # another replica's shard (or a shard unknown): its holder collects it
            since = self.untracked_since.setdefault(name, now)
            if now - since < self.shell.config.retention_s:
                continue
            try:
                await objects.delete_namespaced_custom_object(recovery.GROUP, recovery.VERSION, namespace,
                                                              recovery.PLURAL, name)
                logger.info("deleted WorkloadRecovery %s/%s: job no longer tracked", namespace, name)
            except client.ApiException as exc:
                if not client.is_not_found(exc):
                    logger.warning("cannot delete WorkloadRecovery %s/%s: %s", namespace, name,
                                   client.message_of(exc))
                    continue
            self.untracked_since.pop(name, None)
            self.objects.pop(name, None)
        await self.shell.reporting.policy_statuses()
        await self._mirror_pause()

    async def _mirror_pause(self) -> None:
        """The runtime pause set with ``kubectl`` (``k8s/control.py``): mirrored into the store on change."""
        if self.shell.api is None or self.shell.store is None:
            return
        if self.pause_mirror is None:
            self.pause_mirror = control.PauseMirror(self.shell.config.workload_namespace)
        try:
            await self.pause_mirror.sync(self.shell.api, self.shell.store, self.shell.clock.now())
        except client.API_ERRORS as exc:
            logger.warning("cannot read ConfigMap %s/%s (the runtime pause): %s", self.shell.config.workload_namespace,
                           control.CONFIGMAP, client.message_of(exc))

    async def reconcile_forever(self, stop: asyncio.Event) -> None:
        """Reconcile every ``status_interval_s``, and at once when woken (policy change, new record)."""
        while not stop.is_set():
            self.shell.wake.clear()
            try:
                await self.reconcile()
            except asyncio.CancelledError:
                raise
            except client.API_ERRORS as exc:
                # The API or the network hiccuped (a 429 while the apiserver's storage initialises, a
                # timeout): one line, not a traceback; the next round recomputes everything.
                logger.warning("reconcile round failed: %s; retrying in %.1f s", client.message_of(exc),
                               self.shell.config.status_interval_s)
            except Exception:
                logger.exception("reconcile round failed; retrying in %.1f s", self.shell.config.status_interval_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.shell.wake.wait(), timeout=self.shell.config.status_interval_s)
