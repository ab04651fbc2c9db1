"""What every Kubernetes workload kind shares: identity, opt-in, our annotations, pod facts.

Objects are plain dicts in the API's own (camelCase) shape, as a watch or a GET returns them, so
the mapping to ``JobSnapshot`` is pure and tested without a server.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from trainguard.k8s import workloads as optin
from trainguard.model import times, workloads

PREFIX: Final = "k8s"
"""First segment of a Kubernetes workload id: ``k8s/NAMESPACE/KIND/NAME``."""
RESTARTS_ANNOTATION: Final = "trainguard.dev/restarts"
"""Restarts we made through suspend/resume; they count as attempts besides the workload's own."""
SUSPENDED_BY_ANNOTATION: Final = "trainguard.dev/suspended-by"
"""Set with every suspend of ours (value: why); a suspend without it is a person's, never resumed by us."""
SUSPENDED_AT_ANNOTATION: Final = "trainguard.dev/suspended-at"
"""Set with every suspend of ours (epoch seconds): our resume waits for the pods to go at most
``restart_wait_s`` after it, whoever resumes and whenever (the executor's release step, the watchdog,
after a restart of the operator)."""
STOPPED_ANNOTATION: Final = "trainguard.dev/stopped"
"""Set when we stop a workload (suspend with a reason): the snapshot shows it CANCELLED."""
OVERRIDES_ANNOTATION: Final = "trainguard.dev/overrides"
"""Per-workload overrides in the opt-in comment's form, e.g. ``hang-timeout=90s max-retries=2``
(the same keys and rules as a Slurm job's ``--comment``: budgets can only be lowered)."""
SUSPENDED_HOLD: Final = "Suspended"
MERGE: Final = "application/merge-patch+json"
CONFLICT_RETRIES: Final = 5
"""Patches carry the resourceVersion they were computed from; a 409 is re-read and retried this often."""
"""``hold_reason`` of a suspended workload."""

Obj = dict[str, Any]


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return meta(obj).get("annotations") or {}


def labels(obj: Mapping[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in (meta(obj).get("labels") or {}).items()}


def workload_id(namespace: str, kind: str, name: str) -> str:
    return f"{PREFIX}/{namespace}/{kind}/{name}"


def split_id(job_id: str) -> tuple[str, str, str]:
    """(namespace, kind, name) of a ``k8s/NAMESPACE/KIND/NAME`` id; ValueError otherwise."""
    parts = job_id.split("/")
    if len(parts) != 4 or parts[0] != PREFIX or not all(parts[1:]):
        raise ValueError(f"not a Kubernetes workload id: {job_id!r}")
    return parts[1], parts[2], parts[3]


def comment_of(obj: Mapping[str, Any]) -> str | None:
    """The opt-in in the engine's comment form (``trainguard policy=NAME``); None: not opted in.

    A bad policy name is passed through as written, so the engine records the opt-in error on the
    workload (and then uses no policy) rather than the workload silently disappearing."""
    choice = optin.opt_in(annotations_of(obj))
    if choice is None:
        return None
    extra = " ".join(str(annotations_of(obj).get(OVERRIDES_ANNOTATION, "")).split())
    extra = f" {extra}" if extra else ""
    if choice.error is not None:
        raw = str(annotations_of(obj).get(optin.POLICY_ANNOTATION, "")).strip()
        return f'trainguard policy="{raw[:200]}"{extra}'
    return (f"trainguard policy={choice.policy_name}" if choice.policy_name else "trainguard") + extra


def our_restarts(obj: Mapping[str, Any]) -> int:
    try:
        return max(0, int(str(annotations_of(obj).get(RESTARTS_ANNOTATION, "0"))))
    except ValueError:
        return 0


def timestamp(value: Any) -> float | None:
    if isinstance(value, datetime.datetime):
        return value.timestamp()
    if not value:
        return None
    try:
        return times.parse_iso(str(value)).timestamp()
    except ValueError:
        return None


def condition(obj: Mapping[str, Any], kind: str) -> bool:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return str(cond.get("status")) == "True"
    return False


@dataclass(frozen=True)
class Failure:
    """The first failed container of a pod: where, exit code and reason (e.g. ``OOMKilled``)."""

    pod: str
    node: str
    exit_code: int | None
    reason: str
    signal: int | None = None


def pod_failure(pod: Mapping[str, Any]) -> Failure | None:
    """The failure of a pod that failed (phase Failed or a container terminated non-zero)."""
    status = pod.get("status") or {}
    name, node = str(meta(pod).get("name", "")), str((pod.get("spec") or {}).get("nodeName") or "")
    for cs in status.get("containerStatuses") or []:
        for key in ("state", "lastState"):
            term = ((cs.get(key) or {}).get("terminated")) or None
            if term and term.get("exitCode") not in (0, None):
                return Failure(pod=name, node=node, exit_code=int(term["exitCode"]),
                               reason=str(term.get("reason") or ""),
                               signal=int(term["signal"]) if term.get("signal") else None)
    if status.get("phase") == "Failed":
        return Failure(pod=name, node=node, exit_code=None, reason=str(status.get("reason") or "Failed"))
    return None


def suspended_at(obj: Mapping[str, Any]) -> float | None:
    """When we suspended the workload (``SUSPENDED_AT_ANNOTATION``); None when not recorded."""
    try:
        return float(str(annotations_of(obj)[SUSPENDED_AT_ANNOTATION]))
    except (KeyError, ValueError):
        return None


def controlled(pod: Mapping[str, Any]) -> bool:
    """Whether a controller owns the pod (a JobSet's Job, a PyTorchJob): only such a pod is taken
    away by a suspend, so only such a pod is worth waiting for before a resume."""
    return any(ref.get("controller") for ref in meta(pod).get("ownerReferences") or [])


def live(pod: Mapping[str, Any]) -> bool:
    """A pod that is part of the current run: not being deleted, not finished."""
    phase = (pod.get("status") or {}).get("phase")
    return not meta(pod).get("deletionTimestamp") and phase not in ("Succeeded", "Failed")


RETIRED_KEPT: Final = 1024
"""Pods per workload a ``retire`` book remembers (the newest)."""


def retire(book: dict[str, int], pods: Sequence[Mapping[str, Any]], *, at_ns: int) -> None:
    """Note that our suspend takes ``pods`` away at ``at_ns`` (``KubeScheduler.retired_pods``); a pod retired
    before keeps its first time."""
    for pod in pods:
        uid = str(meta(pod).get("uid") or "")
        if uid and controlled(pod):
            book.setdefault(uid, at_ns)
    while len(book) > RETIRED_KEPT:
        del book[next(iter(book))]


@dataclass(frozen=True)
class Kind:
    """One kind of workload: where it lives in the API and how to read it."""

    kind: str
    group: str
    version: str
    plural: str
    pod_selector_key: str
    """Label every pod of such a workload carries, valued with the workload's name."""
    suspend_path: tuple[str, ...]
    """Path of the suspend field under ``spec``."""
    rank_key: Callable[[Mapping[str, Any], Mapping[str, Any]], tuple[Any, ...]]
    """Sort key of a pod (given the workload) in rank order."""
    own_attempts: Callable[[Mapping[str, Any], Sequence[Mapping[str, Any]]], int]
    """Restarts the workload's own failure policy made (without ours)."""
    finished_state: Callable[[Mapping[str, Any]], workloads.JobState | None]
    """COMPLETED/FAILED when the workload is terminal, else None."""
    counts_replacements: bool = False
    """Whether pods its controller re-creates under the same name after a failure are restarts of
    its own (PyTorchJob) that neither the status nor ``own_attempts`` counts."""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    def suspended(self, obj: Mapping[str, Any]) -> bool:
        node: Any = obj.get("spec") or {}
        for key in self.suspend_path:
            node = (node or {}).get(key) if isinstance(node, Mapping) else None
        return bool(node)

    def suspend_patch(self, value: bool) -> Obj:
        """A merge patch of ``spec`` that sets the suspend field."""
        patch: Any = value
        for key in reversed(self.suspend_path):
            patch = {key: patch}
        return {"spec": patch}

    def pod_selector(self, name: str) -> str:
        return f"{self.pod_selector_key}={name}"


GPU: Final = "nvidia.com/gpu"


def _quantity(value: Any) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def min_nodes(pods: Sequence[Mapping[str, Any]], nodes: Sequence[Mapping[str, Any]]) -> int | None:
    """The fewest nodes the pods fit on by their GPU requests and the largest node's GPUs: how many
    nodes may stay for the workload after an exclusion (pods pack, unlike Slurm tasks on fixed nodes).
    None when no node has GPUs (nothing to count by)."""
    per_node = max((_quantity(((n.get("status") or {}).get("allocatable") or {}).get(GPU)
                              or ((n.get("status") or {}).get("capacity") or {}).get(GPU)) for n in nodes), default=0)
    if per_node <= 0:
        return None
    wanted = 0
    for pod in pods:
        for container in (pod.get("spec") or {}).get("containers") or []:
            resources = container.get("resources") or {}
            wanted += _quantity((resources.get("requests") or {}).get(GPU) or (resources.get("limits") or {}).get(GPU))
    return max(1, -(-wanted // per_node))


def snapshot(kind: Kind, obj: Mapping[str, Any], pods: Sequence[Mapping[str, Any]],
             excluded: Sequence[str], last_failure: Failure | None = None, *,
             fewest_nodes: int | None = None, replaced: int = 0) -> workloads.JobSnapshot:
    """One read of a workload: its state, attempt, pods in rank order and their nodes.

    ``replaced``: restarts of its own the adapter counted from its pods (``Kind.counts_replacements``)."""
    md = meta(obj)
    namespace, name = str(md.get("namespace") or ""), str(md.get("name") or "")
    wid = workload_id(namespace, kind.kind, name)
    current = sorted((p for p in pods if not meta(p).get("deletionTimestamp")), key=lambda p: kind.rank_key(obj, p))
    nodes: list[str] = []
    for pod in current:
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        if node and node not in nodes:
            nodes.append(node)
    failure = next((f for f in (pod_failure(p) for p in current) if f is not None), None) or last_failure
    notes = annotations_of(obj)
    suspended = kind.suspended(obj)
    ours = SUSPENDED_BY_ANNOTATION in notes
    finished = kind.finished_state(obj)
    if finished is not None:
        state = finished
    elif suspended and STOPPED_ANNOTATION in notes:
        state = workloads.JobState.CANCELLED
    elif suspended:
        state = workloads.JobState.PENDING
    elif any((p.get("status") or {}).get("phase") == "Running" for p in current if live(p)):
        state = workloads.JobState.RUNNING
    else:
        state = workloads.JobState.PENDING
    starts = [t for t in (timestamp((p.get("status") or {}).get("startTime")) for p in current) if t is not None]
    return workloads.JobSnapshot(
        workload=wid, job_id=wid, name=name, state=state,
        reason=(failure.reason if failure else "") or (SUSPENDED_HOLD if suspended else ""),
        exit_code=failure.exit_code if failure else None,
        exit_signal=failure.signal if failure else None,
        attempt=kind.own_attempts(obj, current) + replaced + our_restarts(obj),
        nodes=nodes, excluded_nodes=sorted(set(excluded)),
        comment=comment_of(obj) or "",
        namespace=namespace, labels=labels(obj), incarnation=str(md.get("uid") or ""), exclusions_while_running=True,
        stdout_path=f"{PREFIX}://{namespace}/{kind.kind}/{name}", stderr_path=None,
        held=suspended and state is workloads.JobState.PENDING,
        hold_reason=SUSPENDED_HOLD if suspended else "",
        hold_detail=str(notes.get(SUSPENDED_BY_ANNOTATION, "")) if ours
        else ("suspended by someone else" if suspended else ""),
        num_tasks=len(current) or None,
        min_nodes=fewest_nodes,
        submitted_at=timestamp(md.get("creationTimestamp")),
        started_at=min(starts) if starts else None,
    )
