"""Validation before return on Kubernetes: the site's check as a Job pinned to the node (``act.ports.NodeValidator``).

Place in the loop: the validation half of ``KubeScheduler`` (it inherits ``Validating``, whose methods hand
each call to one ``CheckJobs``); ``act.validate`` drives the round exactly as on Slurm. What each step of
the round means here:

- ``reserve_node`` (Slurm: our reservation) = our taint ``trainguard.dev/validating:NoSchedule`` on the
  node, put on while it is still cordoned and tainted by our exclusion: only our check tolerates it;
- ``resume_node`` (the round's "open") = the ordinary lift of our exclusion (``node_writes.NodeWriter.lift``:
  our cordon and our ``trainguard.dev/suspect`` taint, never a person's). From here to the verdict the
  node is kept for the check by the validating taint alone; a person's cordon meanwhile is someone else's
  drain and ends the round (left alone), as on Slurm;
- ``submit_check`` = a ``batch/v1`` Job in the check namespace (the operator's own), named after the
  round's tag (``trainguard-check-<tag>``: a submit cut short by a restart finds it, a repeat is a 409
  that is success), ``backoffLimit: 0`` (the verdict is one run), ``activeDeadlineSeconds`` = the check's
  timeout, its pod pinned to the node by required node affinity on ``metadata.name`` (the scheduler
  still checks the node's GPUs) with every GPU the node has, tolerating the validating taint, our
  suspect taint and the cordon (``node.kubernetes.io/unschedulable``), its container the policy's
  ``image`` running the ``command`` (no shell);
- ``check_status`` = the Job's conditions: Complete -> passed; Failed with the pod's container ended by
  a non-zero exit code (``containerStatuses[].state.terminated.exitCode``) -> failed; Failed otherwise
  (``DeadlineExceeded``, the pod deleted or evicted) -> no verdict; the Job gone -> gone; else waiting
  (a pod that cannot be scheduled or whose image cannot be pulled waits until the round's timeout makes
  it inconclusive). The evidence is the tail of the pod's log (``pods/log``);
- ``cancel_check`` = delete the Job and its pod; ``unreserve_node`` = remove the validating taint
  (a node that no longer exists: nothing to remove). Passed: the node is back in service. Failed or
  inconclusive: ``act.validate`` has cordoned and tainted it again (``drain_node``) before.

Every write is idempotent and every node patch carries the resourceVersion it was computed from.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from kubernetes_asyncio import client as kclient
from kubernetes_asyncio.client.exceptions import ApiException

from trainguard.k8s import client
from trainguard.k8s.kubejobs import common, node_writes, nodes
from trainguard.model import checks
from trainguard.schedulers import base

VALIDATING_TAINT: Final = "trainguard.dev/validating"
"""Our taint on a node under validation: only our check tolerates it (the Slurm reservation's part)."""
VALIDATING_EFFECT: Final = "NoSchedule"
CHECK_LABEL: Final = "trainguard.dev/check"
"""Label on the check Job and its pod: the round's tag (``act.validate._tag``)."""
NODE_ANNOTATION: Final = "trainguard.dev/check-node"
MANAGED_BY: Final = ("app.kubernetes.io/managed-by", "trainguard")
JOB_PREFIX: Final = "trainguard-check-"
CONTAINER: Final = "check"
KEEP_S: Final = 86400
"""``ttlSecondsAfterFinished``: an ended check Job (and its pod's log) stays a day for a person to read."""
TAIL_BYTES: Final = 4096
"""How much of the end of the check's log is kept as evidence (as on Slurm)."""
TAIL_LINES: Final = 200
"""Lines of the log asked for (the API cuts a log from its end by lines only), then cut to ``TAIL_BYTES``."""


def job_name(tag: str) -> str:
    return JOB_PREFIX + tag


def reserve_patch(node: Mapping[str, Any]) -> common.Obj | None:
    """The patch that puts our validating taint on ``node``; None when it is there."""
    taints = [dict(t) for t in (node.get("spec") or {}).get("taints") or []]
    if any(t.get("key") == VALIDATING_TAINT for t in taints):
        return None
    taints.append({"key": VALIDATING_TAINT, "value": "check", "effect": VALIDATING_EFFECT})
    return {"metadata": {"resourceVersion": common.meta(node).get("resourceVersion")}, "spec": {"taints": taints}}


def unreserve_patch(node: Mapping[str, Any]) -> common.Obj | None:
    """The patch that removes our validating taint (and nothing else); None when it is not there."""
    taints = [dict(t) for t in (node.get("spec") or {}).get("taints") or []]
    kept = [t for t in taints if t.get("key") != VALIDATING_TAINT]
    if len(kept) == len(taints):
        return None
    return {"metadata": {"resourceVersion": common.meta(node).get("resourceVersion")}, "spec": {"taints": kept or None}}


def gpus_of(node: Mapping[str, Any]) -> int:
    """The node's allocatable GPUs (the check takes them all: it judges the whole node)."""
    try:
        return int(str(((node.get("status") or {}).get("allocatable") or {}).get(common.GPU, 0)))
    except ValueError:
        return 0


def check_job(node: Mapping[str, Any], command: Sequence[str], *, tag: str, namespace: str, seconds: int,
              workdir: str, image: str) -> common.Obj:
    """The check Job pinned to ``node`` (see the module docstring)."""
    name = str(common.meta(node).get("name", ""))
    labels = {MANAGED_BY[0]: MANAGED_BY[1], CHECK_LABEL: tag}
    gpus = gpus_of(node)
    container: common.Obj = {"name": CONTAINER, "image": image, "command": list(command), "workingDir": workdir}
    if gpus:
        container["resources"] = {"limits": {common.GPU: str(gpus)}}
    pinned = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]}]}
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": job_name(tag), "namespace": namespace, "labels": labels,
                     "annotations": {NODE_ANNOTATION: name}},
        "spec": {
            "backoffLimit": 0, "activeDeadlineSeconds": seconds, "ttlSecondsAfterFinished": KEEP_S,
            "template": {
                "metadata": {"labels": labels, "annotations": {NODE_ANNOTATION: name}},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": pinned}},
                    "tolerations": [
                        {"key": VALIDATING_TAINT, "operator": "Exists"},
                        {"key": nodes.TAINT_KEY, "operator": "Exists"},
                        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
                    ],
                    "containers": [container],
                },
            },
        },
    }


def _conditions(job: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {str(c.get("type")): c for c in (job.get("status") or {}).get("conditions") or []
            if c.get("status") == "True"}


def _terminated(pod: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    for status in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == CONTAINER:
            state = (status.get("state") or {}).get("terminated") or (status.get("lastState") or {}).get("terminated")
            return state if isinstance(state, Mapping) else None
    return None


def _waiting(pod: Mapping[str, Any] | None) -> str:
    """Where a check that has no verdict yet stands, in the cluster's words (evidence of a timeout)."""
    if pod is None:
        return "no pod yet"
    status = pod.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return f"Pending, not scheduled ({condition.get('reason')}: {condition.get('message', '')[:300]})"
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting")
        if waiting:
            return f"{status.get('phase', 'Pending')} ({waiting.get('reason')})"
    return str(status.get("phase") or "Pending")


def verdict(job: Mapping[str, Any], pod: Mapping[str, Any] | None) -> checks.CheckStatus:
    """The check's phase from its Job and its (newest) pod, without the log."""
    conditions = _conditions(job)
    ended = _terminated(pod)
    code = ended.get("exitCode") if ended is not None else None
    exit_code = int(code) if isinstance(code, int) else None
    if "Complete" in conditions:
        return checks.CheckStatus(checks.CheckPhase.PASSED, state="Complete", exit_code=exit_code or 0)
    failed = conditions.get("Failed")
    if failed is not None:
        reason = str(failed.get("reason") or "Failed")
        phase = (checks.CheckPhase.FAILED if exit_code and reason != "DeadlineExceeded"
                 else checks.CheckPhase.NO_VERDICT)
        return checks.CheckStatus(phase, state=f"Failed ({reason})", exit_code=exit_code)
    return checks.CheckStatus(checks.CheckPhase.WAITING, state=_waiting(pod))


class CheckJobs:
    """The validation operations over one API client (see the module docstring)."""

    def __init__(self, api: kclient.ApiClient, writer: node_writes.NodeWriter, namespace: str) -> None:
        self._core = kclient.CoreV1Api(api)
        self._batch = kclient.BatchV1Api(api)
        self._nodes = writer
        self.namespace = namespace
        """Where the check Jobs run: the operator's own namespace (``--workload-namespace``)."""

    async def reserve_node(self, node: str, minutes: int) -> str:
        await self._nodes.write(node, reserve_patch, f"tainted {VALIDATING_TAINT} for its check")
        return f"{VALIDATING_TAINT}:{VALIDATING_EFFECT}"

    async def unreserve_node(self, node: str) -> None:
        await self._nodes.write(node, unreserve_patch, f"{VALIDATING_TAINT} removed", missing_ok=True)

    async def submit_check(self, node: str, command: Sequence[str], *, tag: str, minutes: int, output_dir: str,
                           image: str | None) -> str:
        if not image:
            raise base.SchedulerError(
                "exclusion.validation.image is not set: on Kubernetes the check runs as a container and needs "
                "its image; the round ends inconclusive at its timeout and the node stays out of service")
        body = check_job(await self._nodes.read(node), command, tag=tag, namespace=self.namespace,
                         seconds=minutes * 60, workdir=output_dir, image=image)
        try:
            await self._batch.create_namespaced_job(self.namespace, client.body_of(body))
        except ApiException as exc:
            if exc.status != 409:  # 409: ours already, from a submit cut short (the name is the round's)
                raise base.SchedulerError(f"check Job {self.namespace}/{job_name(tag)}: {exc.status} "
                                          f"{exc.reason}: {exc.body!r}") from exc
        return f"{self.namespace}/{job_name(tag)}"

    async def find_check(self, tag: str) -> str | None:
        job = await self._job(self.namespace, job_name(tag))
        if job is None or common.labels(job).get(CHECK_LABEL) != tag:
            return None
        return f"{self.namespace}/{job_name(tag)}"

    async def check_status(self, job_id: str) -> checks.CheckStatus:
        namespace, _, name = job_id.partition("/")
        job = await self._job(namespace, name)
        if job is None:
            return checks.CheckStatus(checks.CheckPhase.GONE)
        pods = await self._json(self._core.list_namespaced_pod(
            namespace, label_selector=f"{CHECK_LABEL}={common.labels(job).get(CHECK_LABEL, '')}",
            _preload_content=False))
        items = sorted(pods.get("items") or [], key=lambda p: str(common.meta(p).get("creationTimestamp", "")))
        pod = items[-1] if items else None
        status = verdict(job, pod)
        if status.phase is checks.CheckPhase.WAITING:
            return status
        tail = await self._tail(namespace, str(common.meta(pod).get("name"))) if pod is not None else "no pod"
        return checks.CheckStatus(status.phase, state=status.state, exit_code=status.exit_code, output_tail=tail)

    async def cancel_check(self, job_id: str) -> None:
        namespace, _, name = job_id.partition("/")
        try:
            await self._batch.delete_namespaced_job(name, namespace, propagation_policy="Background")
        except ApiException as exc:
            if exc.status != 404:
                raise base.SchedulerError(f"check Job {job_id}: {exc.status} {exc.reason}") from exc

    async def _job(self, namespace: str, name: str) -> common.Obj | None:
        try:
            return await self._json(self._batch.read_namespaced_job(name, namespace, _preload_content=False))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise base.SchedulerError(f"check Job {namespace}/{name}: {exc.status} {exc.reason}") from exc

    async def _tail(self, namespace: str, pod: str) -> str:
        try:
            raw = await client.read_body(await self._core.read_namespaced_pod_log(
                pod, namespace, container=CONTAINER, tail_lines=TAIL_LINES, _preload_content=False))
        except ApiException as exc:
            return f"log of pod {namespace}/{pod} not readable: {exc.status} {exc.reason}"
        return raw[-TAIL_BYTES:].decode("utf-8", errors="replace")

    @staticmethod
    async def _json(call: Any) -> common.Obj:
        data: common.Obj = json.loads(await client.read_body(await call))
        return data


class Validating:
    """``act.ports.NodeValidator``'s operations of ``KubeScheduler`` (with its ``list_nodes``, ``drain_node``
    and ``resume_node``): each handed to its ``node_checks``."""

    node_checks: CheckJobs

    async def reserve_node(self, node: str, minutes: int) -> str:
        return await self.node_checks.reserve_node(node, minutes)

    async def unreserve_node(self, node: str) -> None:
        await self.node_checks.unreserve_node(node)

    async def submit_check(self, node: str, command: Sequence[str], *, tag: str, minutes: int, output_dir: str,
                           partition: str | None = None, image: str | None = None) -> str:
        """``partition`` is Slurm's: a Kubernetes check has the node, not a partition."""
        return await self.node_checks.submit_check(node, command, tag=tag, minutes=minutes, output_dir=output_dir,
                                                   image=image)

    async def find_check(self, tag: str) -> str | None:
        return await self.node_checks.find_check(tag)

    async def check_status(self, job_id: str) -> checks.CheckStatus:
        return await self.node_checks.check_status(job_id)

    async def cancel_check(self, job_id: str) -> None:
        await self.node_checks.cancel_check(job_id)
