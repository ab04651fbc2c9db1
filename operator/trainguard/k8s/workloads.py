"""Opt-in of Kubernetes workloads: the ``trainguard.dev/policy: NAME`` annotation.

Place in the loop: discovery, for workloads that are Kubernetes objects (JobSets and Kubeflow
PyTorchJobs). Slurm jobs opt in with their comment (``policy/overrides.py``); a Kubernetes workload
opts in with one annotation (the documented opt-in, docs/policy.md). The kinds themselves, what to
watch and how to read one object, are described in ``k8s/kubejobs/`` (``common.Kind``), which reads
the opt-in through this module.

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
