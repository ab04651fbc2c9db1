"""Kubeflow PyTorchJob (``kubeflow.org/v1``): identity, ranks and state as the training-operator shows them.

- rank order: the Master (rank 0), then Workers by ``training.kubeflow.org/replica-index``
  (PyTorch's ``RANK`` is index + 1 for a Worker when there is a Master);
- attempt: the highest container ``restartCount`` among the current pods (in-place restarts of
  ``restartPolicy: OnFailure``), plus the pods the training-operator re-created under the same name
  after they failed (``restartPolicy: ExitCode`` with a retryable code; ``Replacements``), plus our
  restarts (``common.RESTARTS_ANNOTATION``). A replacement is a pod name seen again with a new uid
  while its predecessor was seen failed: pods our own suspend/resume replaces were not failed
  (or their failures were forgotten at our suspend), so they are not counted twice;
- state: terminal from the Succeeded and Failed conditions; suspend is ``spec.runPolicy.suspend``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from trainguard.k8s.kubejobs import common
from trainguard.model import workloads

NAME_LABEL: Final = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL: Final = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL: Final = "training.kubeflow.org/replica-index"
_TYPE_ORDER: Final = {"master": 0, "worker": 1}


def rank_key(obj: Mapping[str, Any], pod: Mapping[str, Any]) -> tuple[Any, ...]:
    labels = common.labels(pod)
    kind = labels.get(REPLICA_TYPE_LABEL, "").lower()
    try:
        index = int(labels.get(REPLICA_INDEX_LABEL, "0"))
    except ValueError:
        index = 0
    return (_TYPE_ORDER.get(kind, 2), index, str(common.meta(pod).get("name", "")))


def own_attempts(obj: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> int:
    counts = [int(cs.get("restartCount") or 0)
              for pod in pods for cs in (pod.get("status") or {}).get("containerStatuses") or []]
    return max(counts, default=0)


def restarts_failed_pod(obj: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """Whether the training-operator restarts this failed pod itself (its replica's ``restartPolicy``:
    ``OnFailure``/``Always`` in place, ``ExitCode`` by re-creating it for a retryable exit code 128..255)."""
    failure = common.pod_failure(pod)
    status = pod.get("status") or {}
    failed_now = status.get("phase") == "Failed" or any(
        ((cs.get("state") or {}).get("terminated") or {}).get("exitCode") not in (0, None)
        for cs in status.get("containerStatuses") or [])
    if failure is None or not failed_now:
        return False  # a lastState failure only: restarted in place already (its restartCount shows it)
    kind = common.labels(pod).get(REPLICA_TYPE_LABEL, "").lower()
    specs = (obj.get("spec") or {}).get("pytorchReplicaSpecs") or {}
    spec = next((v for k, v in specs.items() if str(k).lower() == kind), None) or {}
    policy = str(spec.get("restartPolicy") or "Never")
    if policy in ("OnFailure", "Always"):
        return True
    return policy == "ExitCode" and failure.exit_code is not None and failure.exit_code >= 128


ENDED_KEPT: Final = 64
"""Failed pod versions a ``Replacements`` book keeps for the pod-log book (per workload)."""


@dataclass
class Replacements:
    """Pods of one PyTorchJob the training-operator re-created after they failed: each is a restart
    of the workload's own (``restartPolicy: ExitCode``) that the pods' ``restartCount`` does not show,
    because the new pod under the old name starts from 0.

    Fed with every version of the workload's pods the adapter sees (watch events and fresh reads).
    Why pod uids and not a status field: the training-operator keeps no restart counter (its
    ``replicaStatuses`` are recounted from the current pods) and a re-created pod carries no trace
    of its predecessor. The book lives in the adapter's memory; after a restart of ours the engine
    raises it to the highest attempt the audit store recorded (``KubeScheduler.floor_attempt``), so
    only re-creations made while we were down go uncounted (docs/kubernetes-workloads.md)."""

    count: int = 0
    pods: dict[str, tuple[str, bool]] = field(default_factory=dict)
    """Pod name -> (uid, whether that pod was seen failed)."""
    failed: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    """Pod name -> the last failed version seen of the pod now under that name, until it is
    replaced: the training-operator deletes a failed pod before it creates its successor, and in
    between only this copy tells that a restart of its own is on the way."""

    ended: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    """Pod uid -> the last failed version seen of that pod (the newest ``ENDED_KEPT``): what the pod-log
    book makes its ending line from when its own watch saw the pod later than we did (the line then
    reaches the attempt that failed, not the one its re-creation started)."""
    retired: set[str] = field(default_factory=set)
    """Uids of the pods our suspend takes away: one of them failing after the suspend (the kill it
    was about to get, or the suspend's own) is part of our restart, never a restart of its own."""

    def observe(self, pod: Mapping[str, Any]) -> bool:
        """Note one version of a pod; True when it is a re-creation of a failed predecessor."""
        md = common.meta(pod)
        name, uid = str(md.get("name") or ""), str(md.get("uid") or "")
        if not name or not uid:
            return False
        failed = common.pod_failure(pod) is not None and uid not in self.retired
        before = self.pods.get(name)
        replaced = before is not None and before[0] != uid and before[1]
        if replaced:
            self.count += 1
        if before is not None and before[0] != uid:
            self.failed.pop(name, None)
        if common.pod_failure(pod) is not None:  # retired or not: its ending is the old attempt's
            self.ended.pop(uid, None)
            self.ended[uid] = pod
            while len(self.ended) > ENDED_KEPT:
                del self.ended[next(iter(self.ended))]
        if failed:
            self.failed[name] = pod
        self.pods[name] = (uid, failed or (before is not None and before[0] == uid and before[1]))
        return replaced

    def awaiting_successor(self, listed: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """The failed pods seen that are gone from ``listed`` (the current pods) and not re-created yet."""
        names = {str(common.meta(p).get("name") or "") for p in listed}
        return [pod for name, pod in self.failed.items() if name not in names]

    def forget_failures(self) -> None:
        """Our suspend replaces every pod: those replacements are our restart (counted by our annotation),
        whatever becomes of the pods it takes away."""
        self.retired.update(uid for uid, _ in self.pods.values())
        self.pods = {name: (uid, False) for name, (uid, _) in self.pods.items()}
        self.failed.clear()


def finished_state(obj: Mapping[str, Any]) -> workloads.JobState | None:
    if common.condition(obj, "Succeeded"):
        return workloads.JobState.COMPLETED
    if common.condition(obj, "Failed"):
        return workloads.JobState.FAILED
    return None


KIND: Final = common.Kind(
    kind="PyTorchJob", group="kubeflow.org", version="v1", plural="pytorchjobs",
    pod_selector_key=NAME_LABEL, suspend_path=("runPolicy", "suspend"),
    rank_key=rank_key, own_attempts=own_attempts, finished_state=finished_state, counts_replacements=True,
)
