"""Contradictions inside a valid RecoveryPolicy: settings that each validate but cannot all be honoured.

Place: ``trainguard policy validate`` (offline, before a policy reaches Git or the cluster) runs
``contradictions`` on every policy the loader accepted. The engine never reads this module: a
policy with contradictions is still in force, and ``policy.decide`` resolves each one at decision
time (an action that is not allowed falls back, a drain that is not allowed is not done). The
point is to tell the author *before* the first incident that the policy will not do what it
seems to say. Pure: no I/O.

Checks (each finding names the field, in the camelCase the YAML uses):

* an action a rule asks for is not in ``actions.allowed`` — any field named ``action`` or
  ``...Action`` anywhere in the spec whose value names an operation (``applicationErrorAction:
  stop``, ``throughputDropAction: requeue``, and rules added later), as is ``maxRetries`` > 0
  without ``requeue``;
* ``exclusion.drainLemonNodes`` without ``drainNode`` or ``cordonNode`` allowed, or with
  ``blastRadius.maxDrainedShare`` 0, or with ``lemonNodeThreshold`` 1 (every suspect is a lemon);
* ``exclusion.excludeOnHardware`` with ``maxExcludedNodesPerJob`` 0: nothing is ever excluded;
* ``exclusion.validation`` without ``drainLemonNodes``: no node of the policy is drained, no check runs;
* ``detection.hangTimeout`` not longer than ``detection.settle``: a hang would be declared
  before the crash cascade that explains it has been read;
* ``mode: Action`` with ``blastRadius.maxActionsPerHour`` 0: every action is blocked;
* ``blastRadius.maxDrainedShare: 1.0`` with ``maxActionsPerHour`` of ``HIGH_ACTIONS_PER_HOUR`` or more:
  both limits are as good as off, so a run of wrong verdicts (a flapping switch, a bad pattern) can
  drain a whole partition within the hour before anyone looks.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pydantic.alias_generators import to_camel

from trainguard.model import vocab
from trainguard.policy import durations, model

_OPERATIONS = frozenset(str(name) for name in model.ActionName)

HIGH_ACTIONS_PER_HOUR = 100
"""``maxActionsPerHour`` from which, with ``maxDrainedShare`` 1.0, the blast-radius limits no longer
limit: five times the default (20), and the administrators' own default cap (``--max-actions-per-hour``)."""


@dataclass(frozen=True)
class Finding:
    """One contradiction: where (``spec.exclusion.drainLemonNodes``) and what it means in practice."""

    field: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"field": self.field, "message": self.message}


def contradictions(policy: model.RecoveryPolicy) -> list[Finding]:
    """Every contradiction in ``policy``, in a stable order (empty: none found)."""
    spec = policy.spec
    allowed = {str(name) for name in spec.actions.allowed}
    found = list(_rule_actions(spec, allowed))
    if spec.retries.max_retries > 0 and model.ActionName.REQUEUE not in spec.actions.allowed:
        found.append(Finding(
            "spec.retries.maxRetries",
            f"is {spec.retries.max_retries} but requeue is not in actions.allowed: no retry will ever happen",
        ))
    exclusion = spec.exclusion
    if exclusion.drain_lemon_nodes:
        if not allowed & {model.ActionName.DRAIN_NODE, model.ActionName.CORDON_NODE}:
            found.append(Finding(
                "spec.exclusion.drainLemonNodes",
                "is on but neither drainNode nor cordonNode is in actions.allowed: no lemon node will be drained",
            ))
        if spec.blast_radius.max_drained_share == 0:
            found.append(Finding(
                "spec.exclusion.drainLemonNodes",
                "is on but blastRadius.maxDrainedShare is 0: every drain will be blocked",
            ))
        if exclusion.lemon_node_threshold == 1:
            found.append(Finding(
                "spec.exclusion.lemonNodeThreshold",
                "is 1 with drainLemonNodes on: the suspect node of any single failure is drained",
            ))
    if exclusion.validation is not None and not exclusion.drain_lemon_nodes:
        found.append(Finding(
            "spec.exclusion.validation",
            "names a check but drainLemonNodes is off: this policy never drains a node on Slurm, so the check "
            "never runs there (on Kubernetes a node excluded by excludeOnHardware still goes through it)",
        ))
    if exclusion.validation is not None and exclusion.validation.image is None and _kubernetes(spec):
        found.append(Finding(
            "spec.exclusion.validation.image",
            "is not set while the selector names Kubernetes namespaces or labels: on Kubernetes the check runs "
            "as a container and cannot run without its image (every round ends inconclusive, the node stays out)",
        ))
    if exclusion.exclude_on_hardware and exclusion.max_excluded_nodes_per_job == 0:
        found.append(Finding(
            "spec.exclusion.maxExcludedNodesPerJob",
            "is 0 while excludeOnHardware is on: no node will ever be excluded",
        ))
    detection = spec.detection
    if detection.hang_timeout <= detection.settle:
        found.append(Finding(
            "spec.detection.hangTimeout",
            f"({durations.format_seconds(detection.hang_timeout)}) is not longer than detection.settle "
            f"({durations.format_seconds(detection.settle)}): a hang would be declared before the crash lines "
            "that explain it are read",
        ))
    blast = spec.blast_radius
    if blast.max_drained_share >= 1.0 and blast.max_actions_per_hour >= HIGH_ACTIONS_PER_HOUR:
        found.append(Finding(
            "spec.blastRadius.maxDrainedShare",
            f"is {blast.max_drained_share:g} with maxActionsPerHour {blast.max_actions_per_hour}: the blast-radius "
            "limits do not limit, and a run of wrong verdicts can drain a whole partition within the hour "
            f"(keep maxDrainedShare well below 1, e.g. the default 0.1, or maxActionsPerHour below "
            f"{HIGH_ACTIONS_PER_HOUR})",
        ))
    if spec.mode == vocab.Mode.ACTION and spec.blast_radius.max_actions_per_hour == 0:
        found.append(Finding(
            "spec.blastRadius.maxActionsPerHour",
            "is 0 in Action mode: every action will be blocked",
        ))
    return found


def _rule_actions(spec: model.RecoveryPolicySpec, allowed: set[str]) -> Iterator[Finding]:
    """Fields named ``action``/``*Action`` (at any depth) that ask for an operation the policy does not allow."""
    for path, value in _fields(spec, "spec"):
        leaf = path.rsplit(".", 1)[-1].split("[", 1)[0]
        if not (leaf == "action" or leaf.endswith("Action")):
            continue
        for item in value if isinstance(value, list) else [value]:
            name = str(item)
            if name in _OPERATIONS and name not in allowed:
                yield Finding(path, f"asks for {name}, which is not in actions.allowed "
                                    f"({', '.join(sorted(allowed)) or 'nothing'}): it will not be done")


def _fields(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    """(camelCase path, value) of every field below ``value``, depth first."""
    if isinstance(value, BaseModel):
        for name in type(value).model_fields:
            child = getattr(value, name)
            child_path = f"{path}.{to_camel(name)}"
            yield child_path, child
            yield from _fields(child, child_path)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            if isinstance(item, BaseModel):
                yield from _fields(item, f"{path}[{index}]")


def _kubernetes(spec: model.RecoveryPolicySpec) -> bool:
    """Whether the policy is meant for Kubernetes workloads (its selector names namespaces or labels)."""
    return bool(spec.selector.namespaces or spec.selector.labels)
