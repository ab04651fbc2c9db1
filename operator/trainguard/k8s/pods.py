"""What a workload's pods say, read from their JSON (pure): which pods, their rank and node, how they ended.

Place: the kopf shell (``k8s/``), used by ``k8s.podlogs`` (the pod-log source). Everything here works
on the API's JSON shape (camelCase keys, as ``kubectl get -o json`` prints it), so it is tested
without a server.

- ``Target``: the workload a book follows, from the path the Kubernetes adapter gives as the job's
  output, ``k8s://NAMESPACE/KIND/NAME`` (KIND ``JobSet`` or ``PyTorchJob``), and the label selector
  of its pods (the labels the JobSet controller and the training-operator put on them).
- ``Layout`` / ``rank_of``: a pod's global rank, from its labels and the workload's spec.
- ``termination_lines``: a container that ended with a non-zero exit code or a reason, or a pod that
  failed for a reason of its own (evicted, deadline), as ONE line of ours per ending, worded so the
  pattern catalog recognises it (``k8s.*`` entries; the catalog is the one place for patterns).
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainguard.model import times

SCHEME = "k8s://"
JOBSET = "JobSet"
PYTORCHJOB = "PyTorchJob"

JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JOBSET_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
PYTORCH_JOB_NAME = "training.kubeflow.org/job-name"
PYTORCH_REPLICA_TYPE = "training.kubeflow.org/replica-type"
PYTORCH_REPLICA_INDEX = "training.kubeflow.org/replica-index"

SELECTOR_LABEL = {JOBSET: JOBSET_NAME, PYTORCHJOB: PYTORCH_JOB_NAME}
"""The label every pod of a workload of that kind carries, with the workload's name as value."""

LINE_PREFIX = "trainguard: pod "
"""How our own termination lines start (the catalog's ``k8s.*`` entries are anchored on it)."""

MAX_MESSAGE = 512
"""Characters of a termination message kept in the line (the kubelet allows 4 KiB, a log line less)."""

NS = times.NS


@dataclass(frozen=True)
class Target:
    """The workload a pod-log book follows."""

    namespace: str
    kind: str
    name: str

    @property
    def selector(self) -> str:
        return f"{SELECTOR_LABEL[self.kind]}={self.name}"

    @property
    def path(self) -> str:
        return f"{SCHEME}{self.namespace}/{self.kind}/{self.name}"


WORKLOAD_ID_PREFIX = "k8s/"
"""Job ids of Kubernetes workloads (the Kubernetes adapter's ``k8s/NAMESPACE/KIND/NAME``)."""


def is_workload_id(job_id: str) -> bool:
    """Whether ``job_id`` names a Kubernetes workload (its output is its pods' logs)."""
    parts = job_id.split("/")
    return job_id.startswith(WORKLOAD_ID_PREFIX) and len(parts) == 4 and all(parts)


def parse_path(path: str) -> Target | None:
    """``k8s://NAMESPACE/KIND/NAME`` -> its ``Target``; None for any other path (a file, a typo)."""
    if not path.startswith(SCHEME):
        return None
    parts = path[len(SCHEME):].split("/")
    if len(parts) != 3 or not all(parts) or parts[1] not in SELECTOR_LABEL:
        return None
    return Target(parts[0], parts[1], parts[2])


@dataclass(frozen=True)
class Layout:
    """How ranks are laid out over a workload's pods (from its spec; see ``layout_of``).

    JobSet: per replicated job, in spec order, ``(name, replicas, pods per job)``: its ranks follow
    those of the replicated jobs before it. PyTorchJob: whether a Master replica exists (it is rank 0
    and Worker ``i`` is rank ``i + 1``, as the training-operator sets ``RANK``).
    """

    replicated_jobs: tuple[tuple[str, int, int], ...] = ()
    has_master: bool = True


def layout_of(kind: str, workload: Mapping[str, Any]) -> Layout:
    """The rank layout of a JobSet or PyTorchJob object (its JSON)."""
    spec = workload.get("spec") or {}
    if kind == JOBSET:
        jobs = []
        for rj in spec.get("replicatedJobs") or []:
            job_spec = ((rj.get("template") or {}).get("spec") or {})
            parallelism = job_spec.get("parallelism")
            if parallelism is None:
                parallelism = job_spec.get("completions") or 1
            jobs.append((str(rj.get("name", "")), int(rj.get("replicas", 1) or 1), max(1, int(parallelism))))
        return Layout(replicated_jobs=tuple(jobs))
    replicas = spec.get("pytorchReplicaSpecs") or {}
    return Layout(has_master=any(k.lower() == "master" for k in replicas))


def _int(value: object) -> int | None:
    text = str(value).strip() if value is not None else ""
    return int(text) if text.isdigit() and len(text) <= 7 else None


def rank_of(kind: str, pod: Mapping[str, Any], layout: Layout | None) -> int | None:
    """The global rank of ``pod`` in its workload, or None when its labels do not say.

    JobSet: the ranks of the replicated jobs before its own, plus job index x pods per job, plus the
    pod's completion index (an Indexed Job). Without the layout only a pod of a one-pod job has a
    rank (its job's global index). PyTorchJob: Master 0, Worker ``i`` -> ``i + 1`` (``i`` without a
    Master).
    """
    meta = pod.get("metadata") or {}
    labels = {**(meta.get("annotations") or {}), **(meta.get("labels") or {})}
    if kind == JOBSET:
        completion = _int(labels.get(COMPLETION_INDEX))
        if layout is not None and layout.replicated_jobs:
            offset = 0
            for name, replicas, per_job in layout.replicated_jobs:
                if name == labels.get(JOBSET_REPLICATED_JOB):
                    index = _int(labels.get(JOBSET_JOB_INDEX))
                    if index is None or (completion is None and per_job > 1):
                        return None  # several pods per job need the Indexed Job's completion index
                    return offset + index * per_job + (completion or 0)
                offset += replicas * per_job
            return None
        return _int(labels.get(JOBSET_GLOBAL_INDEX)) if completion is None else None
    kind_label = str(labels.get(PYTORCH_REPLICA_TYPE, "")).lower()
    index = _int(labels.get(PYTORCH_REPLICA_INDEX))
    if index is None:
        return None
    if kind_label == "master":
        return index
    if kind_label == "worker":
        return index + (1 if layout is None or layout.has_master else 0)
    return None


def node_of(pod: Mapping[str, Any]) -> str:
    """The node the pod was placed on (``spec.nodeName``), "" while unscheduled."""
    return str((pod.get("spec") or {}).get("nodeName") or "")


def parse_time_ns(text: str | None) -> int | None:
    """RFC 3339 (seconds or fractions, ``Z`` or an offset) -> ns since the epoch; None when absent or bad."""
    if not text:
        return None
    try:
        return times.parse_rfc3339_ns(text)
    except ValueError:
        return None


def format_time(ns: int) -> str:
    """ns since the epoch -> RFC 3339 in whole seconds (UTC), as ``sinceTime`` takes it."""
    return times.rfc3339(times.to_datetime(ns // NS))


@dataclass(frozen=True)
class Ending:
    """One termination worth a line: its identity (emitted once), its time and its text."""

    key: str
    ns: int
    text: str
    container: str = ""


def _signal_name(code: object, given: object) -> str:
    """The signal that ended a container: the runtime's ``signal`` field, else exit code - 128 above 128
    (SIGKILL for 137). Named, so a teardown signal (SIGTERM, SIGABRT) reads as one."""
    number = given if isinstance(given, int) and given > 0 else (code - 128 if isinstance(code, int) and 128 < code
                                                                  < 160 else None)
    if number is None:
        return ""
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def _one_line(text: str) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= MAX_MESSAGE else flat[:MAX_MESSAGE] + " ..."


def _end_of_second(ns: int) -> int:
    """A termination's time: the end of the second its ``finishedAt`` names (the API keeps whole
    seconds), so its line sorts after every line its container printed in that second."""
    return ns - ns % NS + NS - 1


def termination_lines(pod: Mapping[str, Any], *, now_ns: int) -> list[Ending]:
    """The endings of ``pod`` worth a line: every container (current or last state) that terminated
    with a non-zero exit code or a reason other than ``Completed``, and a pod that failed for a reason
    of its own (``Evicted``, ``DeadlineExceeded``, ``NodeLost``...). Each has a stable ``key`` (pod uid,
    container, container id or restart count, finish time) and a stable time, so a book that sees the
    same pod again, or a restarted engine, hands it out once."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    name = str(meta.get("name", ""))
    uid = str(meta.get("uid", "") or name)
    node = node_of(pod) or "-"
    out: list[Ending] = []
    statuses = [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
    for cs in statuses:
        container = str(cs.get("name", ""))
        for which in ("state", "lastState"):
            term = (cs.get(which) or {}).get("terminated")
            if not term:
                continue
            code = term.get("exitCode")
            reason = str(term.get("reason") or "")
            if (code in (0, None)) and reason in ("", "Completed"):
                continue
            finished = parse_time_ns(term.get("finishedAt")) or parse_time_ns(term.get("startedAt"))
            ns = _end_of_second(finished) if finished is not None else now_ns
            ident = term.get("containerID") or f"restart-{cs.get('restartCount', 0)}-{which}"
            text = (f"{LINE_PREFIX}{name} container {container} on {node} ended: reason={reason or 'none'} "
                    f"exitCode={code if code is not None else 'none'}")
            sig = _signal_name(code, term.get("signal"))
            if sig:
                text += f" signal={sig}"
            if term.get("message"):
                text += f" message={_one_line(term['message'])}"
            out.append(Ending(f"{uid}/{container}/{ident}/{finished}", ns, text, container))
    reason = str(status.get("reason") or "")
    if status.get("phase") == "Failed" and reason:
        started = parse_time_ns(status.get("startTime"))
        conditions = [parse_time_ns(c.get("lastTransitionTime")) for c in status.get("conditions") or []]
        at = max([t for t in [started, *conditions] if t is not None], default=None)
        text = f"{LINE_PREFIX}{name} on {node} failed: reason={reason}"
        if status.get("message"):
            text += f" message={_one_line(status['message'])}"
        out.append(Ending(f"{uid}/pod/{reason}", _end_of_second(at) if at is not None else now_ns, text))
    return out


@dataclass
class PodView:
    """What the book keeps of one followed pod: enough to tag its lines and to follow its containers."""

    uid: str
    name: str
    node: str
    rank: int | None
    containers: list[str] = field(default_factory=list)
    started: dict[str, bool] = field(default_factory=dict)
    """Container -> whether it has started (running or terminated): only then are there logs."""
    running: dict[str, bool] = field(default_factory=dict)
    """Container -> whether it runs now (a follow that ends while it runs is reconnected)."""
    finished: bool = False
    """The pod is over (Succeeded/Failed): a container's log that ended will not grow."""


def view_of(kind: str, pod: Mapping[str, Any], layout: Layout | None) -> PodView:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    view = PodView(uid=str(meta.get("uid", "") or meta.get("name", "")), name=str(meta.get("name", "")),
                   node=node_of(pod), rank=rank_of(kind, pod, layout),
                   containers=[str(c.get("name", "")) for c in spec.get("containers") or []],
                   finished=status.get("phase") in ("Succeeded", "Failed"))
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        container = str(cs.get("name", ""))
        view.running[container] = bool(state.get("running"))
        view.started[container] = bool(state.get("running") or state.get("terminated") or cs.get("lastState"))
    return view


def split_timestamp(raw: str) -> tuple[int | None, str]:
    """``"2026-12-01T20:00:00.123456789Z text"`` (a pod log's ``timestamps=true``) -> (ns, text); (None, raw)
    otherwise."""
    head, sep, rest = raw.partition(" ")
    if sep and len(head) >= 20 and head[4:5] == "-" and head[10:11] == "T":
        ns = parse_time_ns(head)
        if ns is not None:
            return ns, rest
    return None, raw
