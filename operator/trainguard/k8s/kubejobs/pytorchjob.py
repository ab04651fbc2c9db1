"""Kubeflow PyTorchJob (``kubeflow.org/v1``): identity, ranks and state as the training-operator shows them.

- rank order: the Master (rank 0), then Workers by ``training.kubeflow.org/replica-index``
  (PyTorch's ``RANK`` is index + 1 for a Worker when there is a Master);
- attempt: the highest container ``restartCount`` among the current pods (in-place restarts of
  ``restartPolicy: OnFailure``) plus our restarts (``common.RESTARTS_ANNOTATION``). A pod the
  training-operator recreates under the same name (``restartPolicy: ExitCode``, retryable code)
  starts with a fresh count and is not seen as a new attempt (docs/kubernetes-workloads.md);
- state: terminal from the Succeeded and Failed conditions; suspend is ``spec.runPolicy.suspend``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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


def finished_state(obj: Mapping[str, Any]) -> workloads.JobState | None:
    if common.condition(obj, "Succeeded"):
        return workloads.JobState.COMPLETED
    if common.condition(obj, "Failed"):
        return workloads.JobState.FAILED
    return None


KIND: Final = common.Kind(
    kind="PyTorchJob", group="kubeflow.org", version="v1", plural="pytorchjobs",
    pod_selector_key=NAME_LABEL, suspend_path=("runPolicy", "suspend"),
    rank_key=rank_key, own_attempts=own_attempts, finished_state=finished_state,
)
