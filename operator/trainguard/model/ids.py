"""Identifier types, so that a workload id is never confused with a job id or a pattern id."""

from __future__ import annotations

from typing import NewType

WorkloadId = NewType("WorkloadId", str)
"""Stable id of a tracked workload, e.g. ``slurm/localcluster/42`` or ``slurm/localcluster/42_3``
for array task 3, or ``jobset/<namespace>/<name>``."""

PatternId = NewType("PatternId", str)
"""Id of a catalog pattern, e.g. ``nccl.watchdog_timeout``."""

NodeName = NewType("NodeName", str)
"""A scheduler node name (Slurm ``NodeName``, Kubernetes node name)."""
