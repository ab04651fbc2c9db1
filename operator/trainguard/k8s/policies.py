"""RecoveryPolicy objects as the operator sees them: validated, de-duplicated, turned into a PolicySet.

Place in the loop: between the kopf watch of RecoveryPolicy objects (``k8s/operator.py``) and the
engine's ``update_policies``. Each object is validated with the pydantic model (``policy/loader``):
what the CRD schema could not say (a non-portable operator pattern, a name two policies select) ends
as an ``Invalid`` condition with the field path in the message, never as a crash. The accepted ones
form the PolicySet the engine runs with, swapped without a restart. ``status_of`` computes each
object's status (conditions + observedGeneration + coveredWorkloads); the shell patches it on change.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic import ValidationError

from trainguard.k8s import condition, policy_status
from trainguard.policy import loader
from trainguard.policy import model as policy_model

# Condition reasons: a closed set of CamelCase constants, so clients and tests can match on them.
VALID: Final = "Valid"
"""Accepted=True / Invalid=False: the spec was read and is in force."""
VALIDATION_FAILED: Final = "ValidationFailed"
"""Accepted=False / Invalid=True: the spec does not validate; the message names the field."""
DUPLICATE_NAME: Final = "DuplicateName"
"""Accepted=False / Invalid=True: another policy is already selected by the same name."""

Key = tuple[str, str]
"""(namespace, metadata.name) of a RecoveryPolicy object."""


@dataclass(frozen=True)
class Entry:
    """One RecoveryPolicy object as last seen."""

    key: Key
    generation: int | None
    resource_version: str | None
    policy: policy_model.RecoveryPolicy | None
    error: str | None
    status: Mapping[str, Any] | None = None


def read(body: Mapping[str, Any]) -> Entry:
    """Validate one object from the API (a RecoveryPolicy dict)."""
    metadata = body.get("metadata") or {}
    key = (str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
    generation = metadata.get("generation")
    document = {
        "apiVersion": body.get("apiVersion", policy_model.API_VERSION),
        "kind": body.get("kind", policy_model.KIND),
        "metadata": {"name": key[1], "namespace": key[0] or None},
        "spec": body.get("spec") or {},
    }
    policy: policy_model.RecoveryPolicy | None = None
    error: str | None = None
    try:
        policy = loader.parse_document(document, f"RecoveryPolicy {key[0]}/{key[1]}")
    except (loader.PolicyError, ValidationError) as exc:
        error = str(exc)
    return Entry(
        key=key,
        generation=generation if isinstance(generation, int) else None,
        resource_version=metadata.get("resourceVersion"),
        policy=policy,
        error=error,
        status=body.get("status") if isinstance(body.get("status"), Mapping) else None,
    )


@dataclass
class PolicyBook:
    """All RecoveryPolicy objects the operator watches, keyed by (namespace, name)."""

    entries: dict[Key, Entry] = field(default_factory=dict)

    def put(self, entry: Entry) -> None:
        self.entries[entry.key] = entry

    def remove(self, key: Key) -> None:
        self.entries.pop(key, None)

    def verdicts(self) -> dict[Key, tuple[bool, str, str]]:
        """Key -> (accepted, reason, message). Of two valid policies selected by the same name, the
        older key (sorted) wins and the other is rejected, so the result does not depend on event order."""
        result: dict[Key, tuple[bool, str, str]] = {}
        owners: dict[str, Key] = {}
        for key in sorted(self.entries):
            entry = self.entries[key]
            if entry.policy is None:
                result[key] = (False, VALIDATION_FAILED, entry.error or "invalid")
                continue
            name = entry.policy.name
            if name in owners:
                other = owners[name]
                result[key] = (False, DUPLICATE_NAME,
                               f"policy name {name!r} is already selected by RecoveryPolicy {other[0]}/{other[1]}")
                continue
            owners[name] = key
            result[key] = (True, VALID, f"in force as {name!r}, mode {entry.policy.spec.mode}")
        return result

    def policy_set(self) -> loader.PolicySet:
        """The accepted policies, for ``engine.update_policies``."""
        verdicts = self.verdicts()
        accepted = [
            entry.policy
            for key, entry in sorted(self.entries.items())
            if entry.policy is not None and verdicts[key][0]
        ]
        return loader.PolicySet(tuple(accepted))


def status_of(
    entry: Entry,
    verdict: tuple[bool, str, str],
    covered: int,
    previous: policy_status.RecoveryPolicyStatus | None,
    now: datetime.datetime,
) -> policy_status.RecoveryPolicyStatus:
    """The status one policy should have (transition times kept while a condition holds)."""
    accepted, reason, message = verdict
    before = {c.type: c for c in (previous.conditions if previous is not None else [])}
    T, F = condition.ConditionStatus.TRUE, condition.ConditionStatus.FALSE

    def make(type_: str, status: condition.ConditionStatus) -> condition.Condition:
        old = before.get(type_)
        since = old.last_transition_time if old is not None and old.status == status else now
        return condition.Condition(type=type_, status=status, reason=reason, message=message[:32768],
                                   observed_generation=entry.generation, last_transition_time=since)

    return policy_status.RecoveryPolicyStatus(
        observed_generation=entry.generation,
        covered_workloads=covered if accepted else 0,
        conditions=[make(condition.ACCEPTED, T if accepted else F), make(condition.INVALID, F if accepted else T)],
    )


def parse_status(raw: Any) -> policy_status.RecoveryPolicyStatus | None:
    if not isinstance(raw, Mapping) or not raw:
        return None
    try:
        return policy_status.RecoveryPolicyStatus.model_validate(raw)
    except ValidationError:
        return None
