"""JobSet (``jobset.x-k8s.io/v1alpha2``): identity, ranks and state as the JobSet controller shows them.

- attempt: ``status.restarts`` (restarts by its own ``failurePolicy``) plus our restarts
  (``common.RESTARTS_ANNOTATION``);
- rank order of pods: replicated job in ``spec.replicatedJobs`` order, then the child Job's index
  (label ``jobset.sigs.k8s.io/job-index``), then the pod's completion index;
- state: terminal from ``status.terminalState`` / the Completed and Failed conditions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from trainguard.k8s.kubejobs import common
from trainguard.model import workloads

NAME_LABEL: Final = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL: Final = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL: Final = "jobset.sigs.k8s.io/job-index"
COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"


def _int(value: Any) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def rank_key(obj: Mapping[str, Any], pod: Mapping[str, Any]) -> tuple[Any, ...]:
    order = [str(r.get("name")) for r in (obj.get("spec") or {}).get("replicatedJobs") or []]
    labels = common.labels(pod)
    notes = common.annotations_of(pod)
    rjob = labels.get(REPLICATED_JOB_LABEL, "")
    position = order.index(rjob) if rjob in order else len(order)
    completion = labels.get(COMPLETION_INDEX) or notes.get(COMPLETION_INDEX)
    return (position, _int(labels.get(JOB_INDEX_LABEL)), _int(completion), str(common.meta(pod).get("name", "")))


def own_attempts(obj: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> int:
    return _int((obj.get("status") or {}).get("restarts"))


def finished_state(obj: Mapping[str, Any]) -> workloads.JobState | None:
    terminal = str((obj.get("status") or {}).get("terminalState") or "")
    if terminal == "Completed" or common.condition(obj, "Completed"):
        return workloads.JobState.COMPLETED
    if terminal == "Failed" or common.condition(obj, "Failed"):
        return workloads.JobState.FAILED
    return None


def max_restarts(obj: Mapping[str, Any]) -> int:
    """The JobSet's own restart budget (``spec.failurePolicy.maxRestarts``; 0 when absent)."""
    return _int(((obj.get("spec") or {}).get("failurePolicy") or {}).get("maxRestarts"))


KIND: Final = common.Kind(
    kind="JobSet", group="jobset.x-k8s.io", version="v1alpha2", plural="jobsets",
    pod_selector_key=NAME_LABEL, suspend_path=("suspend",),
    rank_key=rank_key, own_attempts=own_attempts, finished_state=finished_state,
)
