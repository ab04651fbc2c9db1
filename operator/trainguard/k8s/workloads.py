"""Opt-in of Kubernetes workloads: the ``trainguard.dev/policy: NAME`` annotation.

Place in the loop: discovery, for workloads that are Kubernetes objects (JobSets first; Kubeflow
PyTorchJob/TrainJob later). Slurm jobs opt in with their comment (``policy/overrides.py``); a
Kubernetes workload opts in with one annotation (the documented opt-in, docs/policy.md). The kinds are described by
``WorkloadKind`` entries in ``KINDS`` — what to watch and how to read one object — so a JobSet
adapter (``schedulers/jobset.py``, a later issue) drops in by adding an entry, and the operator's
handlers are registered from this table rather than written per kind.

Nothing here acts: an object without the annotation is never touched, and a bad annotation is an
opt-in error recorded on the workload, never a crash.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

POLICY_ANNOTATION: Final = "trainguard.dev/policy"
"""Annotation that opts a Kubernetes workload in; its value names the RecoveryPolicy."""
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


@dataclass(frozen=True)
class OptIn:
    """A workload's opt-in: the policy it selects, or why the annotation was not understood."""

    policy_name: str | None
    error: str | None = None


def opt_in(annotations: Mapping[str, Any] | None) -> OptIn | None:
    """The opt-in of an object with these annotations; None when it did not opt in."""
    if not annotations or POLICY_ANNOTATION not in annotations:
        return None
    value = str(annotations[POLICY_ANNOTATION]).strip()
    if not value:
        return OptIn(None)  # opted in, default policy
    if len(value) > 253 or not _NAME.match(value):
        return OptIn(None, f"annotation {POLICY_ANNOTATION}={value!r} is not a RecoveryPolicy name (DNS-1123)")
    return OptIn(value)


@dataclass(frozen=True)
class WorkloadKind:
    """A kind of Kubernetes workload Trainguard can watch."""

    kind: str
    """The WorkloadRecovery ``spec.workload.kind`` (``k8s/recovery.py`` WorkloadKind)."""
    group: str
    version: str
    plural: str

    def workload_id(self, namespace: str, name: str) -> str:
        """The engine's workload id, e.g. ``jobset/<namespace>/<name>``."""
        return f"{self.kind.lower()}/{namespace}/{name}"


JOBSET: Final = WorkloadKind(kind="JobSet", group="jobset.x-k8s.io", version="v1alpha2", plural="jobsets")

KINDS: Final[tuple[WorkloadKind, ...]] = ()
"""Kinds the operator watches today. Empty until the JobSet scheduler adapter lands; then
``(JOBSET,)``, and ``k8s/operator/handlers.py`` registers one annotation-filtered handler per entry."""
