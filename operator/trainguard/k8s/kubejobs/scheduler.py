"""``KubeScheduler``: JobSets and PyTorchJobs behind the engine's ``Scheduler`` protocol.

Place in the loop: the scheduler adapter of ``trainguard operator --scheduler kubernetes``. The
engine and the executor drive it exactly like the Slurm adapters; what each operation means here:

- discovery (``list_jobs``) reads a watch-fed cache of the opted-in workloads (annotation
  ``trainguard.dev/policy``), their pods and the nodes; ``get_job`` is always a fresh read (GET of
  the workload and a list of its pods), because the executor verifies every step with it;
- ``requeue_hold`` = suspend through the spec (never a status patch) and count one restart of ours
  in ``trainguard.dev/restarts`` (a suspend/resume cycle replaces every pod: a new attempt);
  ``release`` = resume (only a suspend of ours: ``trainguard.dev/suspended-by``) once the pods the
  suspend takes away are gone, at most ``restart_wait_s`` after the suspend and then anyway (a pod
  that stays must not keep the workload suspended); ``requeue`` = ``requeue_hold`` + ``release``
  (the executor plans them as two recorded steps, ``act.steps``); ``hold`` = suspend;
  ``cancel`` = suspend with ``trainguard.dev/stopped`` (the snapshot shows CANCELLED; nothing is deleted);
- ``exclude_nodes`` / ``drain_node`` = cordon + our ``NoExecute`` taint (``nodes.py``);
  ``resume_node`` lifts only our own;
- validation before return (``act.ports.NodeValidator``): the site's check as a Job pinned to the node,
  in ``check_namespace`` (``node_checks.py``);
- a workload in a terminal state (Completed, or Failed after its own ``maxRestarts``/
  ``backoffLimit``) is not restarted: ``Unsupported`` (its own budget is spent; we do not fight it).

Every operation is idempotent: "already so" is success. Patches that replace lists (node taints)
carry the resourceVersion they were computed from, and a 409 is retried from a fresh read.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

from kubernetes_asyncio import client as kclient
from kubernetes_asyncio.client.exceptions import ApiException

from trainguard.k8s import client
from trainguard.k8s import workloads as optin
from trainguard.k8s.kubejobs import common, jobset, node_checks, node_writes, nodes, pytorchjob, watching
from trainguard.model import workloads
from trainguard.schedulers import base

logger = logging.getLogger(__name__)

KINDS: Final[tuple[common.Kind, ...]] = watching.KINDS
MERGE: Final = common.MERGE
CONFLICT_RETRIES: Final = common.CONFLICT_RETRIES
DEFAULT_OWN_RESTART_WAIT_S: Final = 30.0
"""How long a restart step waits for the workload's own failure policy to restart it (a JobSet
controller restarts within seconds of a pod failure) before it restarts it itself."""
DEFAULT_RESTART_WAIT_S: Final = 120.0
"""How long after our suspend ``release`` waits for the workload's pods to go; then it resumes anyway."""


class _Conflict(base.SchedulerError):
    """A patch carrying a resourceVersion met a newer one (409): re-read and try again."""


class KubeScheduler(node_checks.Validating):
    """The Kubernetes workload adapter; ``start`` begins the watches, ``close`` stops them."""

    name = "kubernetes"

    def __init__(self, api: kclient.ApiClient, *, kinds: Sequence[common.Kind] = KINDS,
                 restart_wait_s: float = DEFAULT_RESTART_WAIT_S,
                 now: Callable[[], float] = time.time, own_api: bool = True,
                 namespaces: Sequence[str] = (), node_pool_label: str = nodes.DEFAULT_POOL_LABEL,
                 check_namespace: str = "default") -> None:
        self._api = api
        self._own_api = own_api
        self._core = kclient.CoreV1Api(api)
        self._custom = kclient.CustomObjectsApi(api)
        self._kinds = {k.kind: k for k in kinds}
        self.namespaces = tuple(namespaces)
        """Namespaces whose workloads are watched; empty: every namespace."""
        self.node_pool_label = node_pool_label
        """The node label whose value is a node's pool, its partition for the limits (``nodes.pool_of``)."""
        self.restart_wait_s = restart_wait_s
        self.own_restart_wait_s = DEFAULT_OWN_RESTART_WAIT_S
        self._now = now
        self._nodes = node_writes.NodeWriter(self._core, now)
        """Cordon + our taint, and lifting only our own (``node_writes``)."""
        self.node_checks = node_checks.CheckJobs(api, self._nodes, check_namespace)
        """Validation checks as Jobs in ``check_namespace`` (the operator's own namespace)."""
        self._cache = watching.Cache(kinds, self.namespaces, api, self._json, self._note_failure)
        """The watch-fed view discovery reads: the workloads, their pods, the nodes (``watching.Cache``)."""
        self._failures: dict[str, common.Failure] = {}
        """Last failed container seen per workload: the pod may be deleted by its restart before we read it."""
        self._seen_nodes: dict[str, set[str]] = {}
        """Nodes any pod of the workload ran on while we watched: its allocation, past attempts included."""
        self._replacements: dict[str, pytorchjob.Replacements] = {}
        """Per workload of a ``counts_replacements`` kind: its pods re-created after a failure."""
        self._retired: dict[str, dict[str, int]] = {}
        """Per workload: uid -> when our suspend took that pod away (ns), for its pod-log book (``retired_pods``)."""
        self._uids: dict[str, str] = {}
        """The uid each workload id was last read with: a new one is a new object under the same name."""
        self.changed = self._cache.changed
        """Set on every watch event: the engine's discovery may look now."""

    def kind(self, kind_name: str) -> common.Kind | None:
        return self._kinds.get(kind_name)

    def uid_of(self, job_id: str) -> str | None:
        """The workload's uid from the cache (None when not seen)."""
        try:
            namespace, kind_name, name = common.split_id(job_id)
        except ValueError:
            return None
        obj = self._cache.objects.get(kind_name, {}).get((namespace, name))
        return str(common.meta(obj).get("uid")) if obj is not None else None

    # ------------------------------------------------------------------ raw reads and writes

    async def _json(self, call: Awaitable[Any]) -> common.Obj:
        data: common.Obj = json.loads(await client.read_body(await call))
        return data

    async def _get_object(self, kind: common.Kind, namespace: str, name: str) -> common.Obj:
        try:
            return await self._json(self._custom.get_namespaced_custom_object(
                kind.group, kind.version, namespace, kind.plural, name, _preload_content=False))
        except ApiException as exc:
            if exc.status == 404:
                raise base.JobGone(f"{kind.kind} {namespace}/{name} not found") from exc
            raise base.SchedulerError(f"{kind.kind} {namespace}/{name}: {exc.status} {exc.reason}") from exc

    async def _list_pods(self, kind: common.Kind, namespace: str, name: str) -> list[common.Obj]:
        data = await self._json(self._core.list_namespaced_pod(
            namespace, label_selector=kind.pod_selector(name), _preload_content=False))
        return list(data.get("items") or [])

    async def _patch_object(self, kind: common.Kind, namespace: str, name: str, body: common.Obj) -> None:
        try:
            await self._custom.patch_namespaced_custom_object(
                kind.group, kind.version, namespace, kind.plural, name, body,
                _content_type=MERGE)  # type: ignore[call-arg]  # a documented **kwargs option
        except ApiException as exc:
            if exc.status == 404:
                raise base.JobGone(f"{kind.kind} {namespace}/{name} not found") from exc
            detail = f"{exc.status} {exc.reason}: {exc.body!r}"
            if exc.status == 409:
                raise _Conflict(f"{kind.kind} {namespace}/{name}: {detail}") from exc
            raise base.SchedulerError(f"{kind.kind} {namespace}/{name}: {detail}") from exc

    async def _read(self, job_id: str) -> tuple[common.Kind, str, str, common.Obj]:
        namespace, kind_name, name = common.split_id(job_id)
        kind = self._kinds.get(kind_name)
        if kind is None:
            raise base.JobGone(f"{job_id}: kind {kind_name} is not served")
        return kind, namespace, name, await self._get_object(kind, namespace, name)

    # ------------------------------------------------------------------ the Scheduler protocol

    async def list_jobs(self) -> list[workloads.JobSnapshot]:
        """The opted-in workloads in the watch cache (waits briefly for the first listing)."""
        await self.wait_synced(within_s=30.0)
        excluded = self._excluded()
        node_list = list(self._cache.nodes().values())
        found: list[workloads.JobSnapshot] = []
        for kind_name, objects in self._cache.objects.items():
            kind = self._kinds[kind_name]
            # The cached pods by (namespace, workload name), once per round: scanning every pod for every
            # workload made a round cost workloads x pods (93% of the operator's CPU at 2,000 JobSets).
            owned: dict[tuple[str, str], list[dict[str, Any]]] = {}
            for (ns, _), p in self._cache.pods[kind_name].items():
                owner = common.labels(p).get(kind.pod_selector_key)
                if owner is not None:
                    owned.setdefault((ns, owner), []).append(p)
            for (namespace, name), obj in list(objects.items()):
                if common.comment_of(obj) is None:
                    continue
                pods = owned.get((namespace, name), [])
                wid = common.workload_id(namespace, kind.kind, name)
                self._note_object(wid, obj)
                fewest = common.min_nodes(pods, node_list)
                found.append(common.snapshot(kind, obj, pods, excluded, self._failures.get(wid), fewest_nodes=fewest,
                                             replaced=self._replaced(wid)))
        return found

    async def get_job(self, job_id: str) -> workloads.JobSnapshot:
        kind, namespace, name, obj = await self._read(job_id)
        self._note_object(job_id, obj)
        pods = await self._list_pods(kind, namespace, name)
        for pod in pods:
            self._note_failure(kind, pod)
        node_list = list((await self._json(self._core.list_node(_preload_content=False))).get("items") or [])
        excluded = [str(common.meta(n).get("name", "")) for n in node_list if nodes.has_our_taint(n)]
        return common.snapshot(kind, obj, pods, excluded, self._failures.get(job_id),
                               fewest_nodes=common.min_nodes(pods, node_list), replaced=self._replaced(job_id))

    async def floor_attempt(self, job_id: str, attempt: int) -> None:
        """After a restart of ours: count as many re-creations of the workload's pods as it takes to
        report ``attempt`` (the highest one the audit store recorded). The re-creations made before
        our restart left no trace on the cluster; without this the attempt would go back to one
        already judged, and the next failure would be taken for that attempt's."""
        _, kind_name, _ = common.split_id(job_id)
        kind = self._kinds.get(kind_name)
        if kind is None or not kind.counts_replacements:
            return
        deficit = attempt - (await self.get_job(job_id)).attempt
        if deficit > 0:
            self._replacements.setdefault(job_id, pytorchjob.Replacements()).count += deficit
            logger.info("%s: %d restart(s) of its own made before our restart counted from the audit store "
                        "(attempt %d)", job_id, deficit, attempt)

    def _note_object(self, job_id: str, obj: common.Obj) -> None:
        """A workload read with a uid other than the last one is a new object under the same name
        (deleted and created again): what we remembered of the old one's pods is not its."""
        uid = str(common.meta(obj).get("uid") or "")
        if not uid:
            return
        if self._uids.get(job_id, uid) != uid:
            self._replacements.pop(job_id, None)
            self._retired.pop(job_id, None)
            self._failures.pop(job_id, None)
            self._seen_nodes.pop(job_id, None)
        self._uids[job_id] = uid

    def ended_pods(self, namespace: str, kind: str, name: str) -> list[common.Obj]:
        """The failed pod versions seen of a workload (``pytorchjob.Replacements.ended``), for its
        pod-log book, whose own watch may see a failure only after the re-creation moved the attempt."""
        book = self._replacements.get(common.workload_id(namespace, kind, name))
        return [dict(pod) for pod in book.ended.values()] if book is not None else []

    def retired_pods(self, namespace: str, kind: str, name: str) -> dict[str, int]:
        """The pods our suspends took away (uid -> when, ns): what they print or how they end after that is
        our restart's doing, never the next attempt's failure (``podlogs.PodLogSource.retired``)."""
        return dict(self._retired.get(common.workload_id(namespace, kind, name)) or {})

    def _replaced(self, job_id: str) -> int:
        book = self._replacements.get(job_id)
        return book.count if book is not None else 0

    def _guard(self, job_id: str, obj: common.Obj) -> None:
        """Never act on a workload that did not opt in."""
        if optin.opt_in(common.annotations_of(obj)) is None:
            raise base.SchedulerError(f"{job_id} has no {optin.POLICY_ANNOTATION} annotation: not touched")

    async def _suspend(self, job_id: str, why: str, *, count_restart: bool, stop: bool = False) -> None:
        for _ in range(CONFLICT_RETRIES):  # the controllers write the object too (status): 409 -> fresh read
            with contextlib.suppress(_Conflict):
                return await self._suspend_once(job_id, why, count_restart=count_restart, stop=stop)
        raise base.SchedulerError(f"{job_id}: changed concurrently {CONFLICT_RETRIES} times; not suspended")

    async def _suspend_once(self, job_id: str, why: str, *, count_restart: bool, stop: bool) -> None:
        kind, namespace, name, obj = await self._read(job_id)
        self._guard(job_id, obj)
        notes = common.annotations_of(obj)
        if kind.finished_state(obj) is not None:
            if stop:
                return  # already finished: a stop has nothing left to do
            raise base.Unsupported(f"{job_id} is {kind.finished_state(obj)}: its own restart budget is spent or it "
                                   "is done; a terminal workload is not restarted")
        if kind.suspended(obj) and common.SUSPENDED_BY_ANNOTATION not in notes:
            raise base.SchedulerError(f"{job_id} was suspended by someone else; left alone")
        annotations: dict[str, Any] = {common.SUSPENDED_BY_ANNOTATION: f"{base.OUR_REASON_PREFIX} {why}",
                                       common.SUSPENDED_AT_ANNOTATION: f"{self._now():.3f}"}
        if count_restart:
            annotations[common.RESTARTS_ANNOTATION] = str(common.our_restarts(obj) + 1)
            if job_id in self._replacements:  # the pods our resume makes are our restart, counted above
                self._replacements[job_id].forget_failures()
        if stop:
            annotations[common.STOPPED_ANNOTATION] = f"{base.OUR_REASON_PREFIX} {why}"
        body = {"metadata": {"resourceVersion": common.meta(obj).get("resourceVersion"), "annotations": annotations},
                **kind.suspend_patch(True)}
        common.retire(self._retired.setdefault(job_id, {}), await self._list_pods(kind, namespace, name),
                      at_ns=int(self._now() * 1e9))
        await self._patch_object(kind, namespace, name, body)

    async def _own_restart(self, job_id: str, attempt: int | None) -> bool:
        """Whether the workload's own failure policy restarted it: past ``attempt`` already (a
        PyTorchJob's failed pod re-created after the executor's last read), or about to (waiting up
        to ``own_restart_wait_s``: a JobSet with restarts left whose current pods include a failed
        one). Then our restart step must not restart it a second time."""
        if attempt is not None and (await self.get_job(job_id)).attempt > attempt:
            logger.info("%s: past attempt %d: restarted by its own failure policy; no restart of ours", job_id, attempt)
            return True
        kind, namespace, name, obj = await self._read(job_id)
        if kind.finished_state(obj) is not None or kind.suspended(obj):
            return False
        if kind.counts_replacements:
            return await self._own_pod_restart(job_id, kind, namespace, name, obj)
        if kind is not jobset.KIND:
            return False
        baseline = jobset.own_attempts(obj, [])
        if jobset.max_restarts(obj) <= baseline:
            return False  # its own budget is spent: the restart is ours to make
        if not any(common.pod_failure(p) for p in await self._list_pods(kind, namespace, name)):
            return False  # nothing failed (a hang): its own policy will not restart it
        deadline = self._now() + self.own_restart_wait_s
        while self._now() < deadline:
            _, _, _, obj = await self._read(job_id)
            if jobset.own_attempts(obj, []) > baseline:
                logger.info("%s: restarted by its own failure policy; no restart of ours", job_id)
                return True
            await asyncio.sleep(0.5)
        return False

    async def _own_pod_restart(self, job_id: str, kind: common.Kind, namespace: str, name: str,
                               obj: common.Obj) -> bool:
        """A PyTorchJob: whether the training-operator restarts its failed pod itself (the replica's
        ``restartPolicy`` covers the failure), waiting up to ``own_restart_wait_s`` for the restart to
        show (a re-created pod or a higher ``restartCount``). A restart it already made before this
        step shows in the attempt, and the executor skips the step without calling it. A failed pod
        already deleted and not yet re-created counts as failed: the re-creation is on its way."""
        pods = await self._list_pods(kind, namespace, name)
        for pod in pods:
            self._note_failure(kind, pod)
        book = self._replacements.get(job_id)
        failed = [*pods, *(book.awaiting_successor(pods) if book is not None else ())]
        if not any(pytorchjob.restarts_failed_pod(obj, p) for p in failed):
            return False  # nothing its policy restarts (a hang, a permanent exit code, restartPolicy Never)

        def restarts(current: Sequence[common.Obj]) -> int:
            live_pods = [p for p in current if not common.meta(p).get("deletionTimestamp")]
            return self._replaced(job_id) + kind.own_attempts(obj, live_pods)

        baseline = restarts(pods)
        deadline = self._now() + self.own_restart_wait_s
        while self._now() < deadline:
            await asyncio.sleep(0.5)
            pods = await self._list_pods(kind, namespace, name)
            for pod in pods:
                self._note_failure(kind, pod)
            if restarts(pods) > baseline:
                logger.info("%s: its failed pod was restarted by the training-operator; no restart of ours", job_id)
                return True
        return False

    async def requeue_hold(self, job_id: str, *, attempt: int | None = None) -> None:
        if await self._own_restart(job_id, attempt):
            return  # its own restart stands (never a second one); exclusions follow while it runs
        await self._suspend(job_id, "restart: suspended until its pods are gone (and suspect nodes excluded)",
                            count_restart=True)

    async def hold(self, job_id: str) -> None:
        kind, _, _, obj = await self._read(job_id)
        if kind.suspended(obj):
            return
        await self._suspend(job_id, "held by recovery", count_restart=False)

    async def release(self, job_id: str) -> None:
        """Resume a suspend of ours once the pods the suspend takes away are gone (resuming before the
        controllers removed them may restart nothing). The wait ends at most ``restart_wait_s`` after
        the suspend, then it resumes anyway: a pod that stays (its controller down, a node that never
        confirms) must not keep the workload suspended. A pod stuck Terminating (a dead node) counts as
        gone: the Job controller creates its replacement beside it."""
        kind, namespace, name, obj = await self._read(job_id)
        if not self._ours_to_resume(job_id, kind, obj):
            return
        await self._await_pods_gone(job_id, kind, namespace, name, obj)
        for _ in range(CONFLICT_RETRIES):
            kind, namespace, name, obj = await self._read(job_id)
            if not self._ours_to_resume(job_id, kind, obj):
                return
            body = {"metadata": {"resourceVersion": common.meta(obj).get("resourceVersion"),
                                 "annotations": {common.SUSPENDED_BY_ANNOTATION: None,
                                                 common.SUSPENDED_AT_ANNOTATION: None}},
                    **kind.suspend_patch(False)}
            with contextlib.suppress(_Conflict):
                return await self._patch_object(kind, namespace, name, body)
        raise base.SchedulerError(f"{job_id}: changed concurrently {CONFLICT_RETRIES} times; not resumed")

    def _ours_to_resume(self, job_id: str, kind: common.Kind, obj: common.Obj) -> bool:
        """Whether ``obj`` is suspended by us (False: not suspended); a person's suspend raises."""
        self._guard(job_id, obj)
        if not kind.suspended(obj):
            return False
        if common.SUSPENDED_BY_ANNOTATION not in common.annotations_of(obj):
            raise base.SchedulerError(f"{job_id} was suspended by someone else; left suspended")
        return True

    async def _await_pods_gone(self, job_id: str, kind: common.Kind, namespace: str, name: str,
                               obj: common.Obj) -> None:
        """Wait until no live pod a controller owns is left (``common.controlled``: nothing takes a bare
        pod away), at most until ``restart_wait_s`` after our suspend (from now when not recorded)."""
        now = self._now()
        since = common.suspended_at(obj)
        deadline = min(now, since if since is not None else now) + self.restart_wait_s
        while True:
            staying = sorted(str(common.meta(p).get("name")) for p in await self._list_pods(kind, namespace, name)
                             if common.live(p) and common.controlled(p))
            if not staying:
                return
            if self._now() >= deadline:
                logger.warning("%s: pods %s still present %.0f s after our suspend; resumed anyway", job_id,
                               ", ".join(staying), self.restart_wait_s)
                return
            await asyncio.sleep(0.5)

    async def requeue(self, job_id: str) -> None:
        """A full restart in one call: ``requeue_hold`` then ``release`` (nothing when the workload's
        own failure policy restarted it). The executor plans the two as separate recorded steps
        (``act.steps``), so that a restart of ours between them is resumed, never left suspended."""
        await self.requeue_hold(job_id)
        await self.release(job_id)

    async def cancel(self, job_id: str) -> None:
        await self._suspend(job_id, "stopped by recovery", count_restart=False, stop=True)

    async def exclude_nodes(self, job_id: str, names: list[str]) -> None:
        """Cordon and taint each node; only nodes the workload runs or ran on while we watched (its
        allocation): a node-wide exclusion must never reach a node the workload never used. After a
        restart of the operator a node only an earlier attempt used is refused (SchedulerError: the
        executor abandons and the watchdog takes over), never guessed."""
        job = await self.get_job(job_id)
        if not job.comment:
            raise base.SchedulerError(f"{job_id} did not opt in: not touched")
        known = set(job.nodes) | set(job.excluded_nodes) | self._seen_nodes.get(job_id, set())
        outside = sorted(set(names) - known)
        if outside:
            raise base.SchedulerError(f"{job_id}: nodes {', '.join(outside)} are not in its allocation; not excluded")
        for node in names:
            await self._nodes.exclude(node, job_id, f"suspect node of {job_id}")

    async def drain_node(self, node: str, reason: str) -> None:
        await self._nodes.exclude(node, "", reason)

    async def resume_node(self, node: str) -> None:
        await self._nodes.lift(node)

    async def list_nodes(self) -> list[workloads.NodeSnapshot]:
        data = await self._json(self._core.list_node(_preload_content=False))
        return [nodes.snapshot(n, self.node_pool_label) for n in data.get("items") or []]

    async def close(self) -> None:
        await self._cache.close()
        if self._own_api:
            await self._api.close()

    # ------------------------------------------------------------------ the watch-fed cache

    def start(self) -> None:
        """Begin the watches (workloads of each kind, their pods, nodes)."""
        self._cache.start()

    async def wait_synced(self, within_s: float) -> bool:
        """Whether every watch has had its first listing (waits up to ``within_s``)."""
        return await self._cache.wait_synced(within_s)

    def _note_failure(self, kind: common.Kind, pod: common.Obj) -> None:
        """Remember the pod's node and failure: its restart may delete the pod before anyone reads it."""
        name = common.labels(pod).get(kind.pod_selector_key)
        if not name:
            return
        wid = common.workload_id(str(common.meta(pod).get("namespace")), kind.kind, name)
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            self._seen_nodes.setdefault(wid, set()).add(str(node))
        if kind.counts_replacements:
            self._replacements.setdefault(wid, pytorchjob.Replacements()).observe(pod)
        failure = common.pod_failure(pod)
        if failure is not None:
            self._failures[wid] = failure

    def _excluded(self) -> list[str]:
        return [name for name, node in self._cache.nodes().items() if nodes.has_our_taint(node)]

