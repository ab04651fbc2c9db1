"""Excluding suspect nodes on Kubernetes: cordon plus our own taint, and lifting only what we set.

A node we exclude gets, in one patch guarded by its resourceVersion (a concurrent change by a
person or another controller makes it fail with 409 and we re-read, never overwrite):

- ``spec.unschedulable: true`` (the cordon), unless someone cordoned it before us;
- the taint ``trainguard.dev/suspect=<workload>:NoExecute``: new pods do not start there, and pods
  already running there are evicted, so a workload that restarted onto the node before we acted
  is restarted once more by its own failure policy, away from it;
- the annotation ``trainguard.dev/excluded-by`` (JSON: workload, reason, time, whether the cordon
  is ours): the record that this exclusion is ours.

Lifting (``lift_patch``) removes our taint, the cordon only when the annotation says we set it,
and the annotation; a node without our annotation is refused. Taints we did not set are kept as
they are. The rule that lifts an exclusion is in ``scheduler.KubeScheduler.sweep_exclusions``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from trainguard.k8s.kubejobs import common
from trainguard.model import workloads
from trainguard.schedulers import base

TAINT_KEY: Final = "trainguard.dev/suspect"
DEFAULT_POOL_LABEL: Final = "trainguard.dev/node-pool"
"""The node label whose value is a node's pool (``--node-pool-label``): pools stand in for Slurm's
partitions in the blast-radius limits (``maxDrainedShare`` and the administrator's per-pool share)."""
NO_POOL: Final = "(no pool label)"
"""The pool of every node without the label: together, as one pool, so a share limit still holds."""
TAINT_EFFECT: Final = "NoExecute"
EXCLUDED_BY_ANNOTATION: Final = "trainguard.dev/excluded-by"


@dataclass(frozen=True)
class Exclusion:
    """Our record on a node (its ``trainguard.dev/excluded-by`` annotation)."""

    workload: str
    reason: str
    at: float
    cordoned: bool
    """Whether the cordon is ours (the node was schedulable when we excluded it)."""


def taint_value(workload: str) -> str:
    """A label-value form of the workload id (63 characters at most, hashed when longer)."""
    value = re.sub(r"[^A-Za-z0-9_.-]+", ".", workload).strip("._-")
    if len(value) > 63:
        value = value[:52].rstrip("._-") + "." + hashlib.sha256(workload.encode()).hexdigest()[:10]
    return value or "trainguard"


def exclusion_of(node: Mapping[str, Any]) -> Exclusion | None:
    raw = common.annotations_of(node).get(EXCLUDED_BY_ANNOTATION)
    if not raw:
        return None
    try:
        data = json.loads(raw)
        return Exclusion(workload=str(data["workload"]), reason=str(data.get("reason", "")),
                         at=float(data.get("at", 0.0)), cordoned=bool(data.get("cordoned", False)))
    except (ValueError, KeyError, TypeError):
        return None


def _taints(node: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [dict(t) for t in (node.get("spec") or {}).get("taints") or []]


def has_our_taint(node: Mapping[str, Any]) -> bool:
    return any(t.get("key") == TAINT_KEY for t in _taints(node))


def ready(node: Mapping[str, Any]) -> bool:
    return common.condition(node, "Ready")


def exclude_patch(node: Mapping[str, Any], workload: str, reason: str, now: float) -> dict[str, Any] | None:
    """The patch that excludes ``node`` for ``workload``; None when it is already excluded by us."""
    if has_our_taint(node) and exclusion_of(node) is not None:
        return None
    unschedulable = bool((node.get("spec") or {}).get("unschedulable"))
    previous = exclusion_of(node)
    cordon_ours = previous.cordoned if previous is not None else not unschedulable
    record = {"workload": workload, "reason": reason if reason.startswith(base.OUR_REASON_PREFIX)
              else f"{base.OUR_REASON_PREFIX} {reason}", "at": now, "cordoned": cordon_ours}
    taints = _taints(node)
    if not any(t.get("key") == TAINT_KEY for t in taints):
        taints.append({"key": TAINT_KEY, "value": taint_value(workload), "effect": TAINT_EFFECT})
    return {
        "metadata": {"resourceVersion": common.meta(node).get("resourceVersion"),
                     "annotations": {EXCLUDED_BY_ANNOTATION: json.dumps(record, sort_keys=True)}},
        "spec": {"unschedulable": True, "taints": taints},
    }


def lift_patch(node: Mapping[str, Any]) -> dict[str, Any] | None:
    """The patch that lifts our exclusion; None when nothing of ours is left. SchedulerError when
    the node carries our taint but not our record (someone copied or edited it: not ours to lift)."""
    record = exclusion_of(node)
    if record is None:
        if has_our_taint(node):
            raise base.SchedulerError(f"node {common.meta(node).get('name')}: {TAINT_KEY} taint without our "
                                      f"{EXCLUDED_BY_ANNOTATION} record; left alone")
        raise base.SchedulerError(f"node {common.meta(node).get('name')} was not excluded by trainguard")
    spec: dict[str, Any] = {"taints": [t for t in _taints(node) if t.get("key") != TAINT_KEY] or None}
    if record.cordoned:
        spec["unschedulable"] = None
    return {"metadata": {"resourceVersion": common.meta(node).get("resourceVersion"),
                         "annotations": {EXCLUDED_BY_ANNOTATION: None}},
            "spec": spec}


def pool_of(node: Mapping[str, Any], label: str = DEFAULT_POOL_LABEL) -> str:
    """The node's pool: the value of ``label``, or ``NO_POOL``."""
    value = (common.meta(node).get("labels") or {}).get(label)
    return str(value) if value else NO_POOL


def snapshot(node: Mapping[str, Any], pool_label: str = DEFAULT_POOL_LABEL) -> workloads.NodeSnapshot:
    """The node in the scheduler-neutral words (Slurm's): IDLE, DRAIN (cordoned), DOWN (not Ready);
    its pool (``pool_label``) as its partition."""
    record = exclusion_of(node)
    cordoned = bool((node.get("spec") or {}).get("unschedulable"))
    words = ["IDLE" if ready(node) else "DOWN"]
    if cordoned or has_our_taint(node):
        words.append("DRAIN")
    return workloads.NodeSnapshot(
        name=str(common.meta(node).get("name", "")), state="+".join(words),
        reason=record.reason if record is not None else "",
        drained=has_our_taint(node) or cordoned, partitions=[pool_of(node, pool_label)],
    )
