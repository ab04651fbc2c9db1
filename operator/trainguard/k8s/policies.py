"""RecoveryPolicy objects as the operator sees them: validated, de-duplicated, turned into a PolicySet.

Place in the loop: between the kopf watch of RecoveryPolicy objects (``k8s/operator/handlers.py``) and the
engine's ``update_policies``. Each object is validated with the pydantic model (``policy/loader``):
what the CRD schema could not say (a non-portable operator pattern, a name two policies select) ends
as an ``Invalid`` condition with the field path in the message, never as a crash. The accepted ones
form the PolicySet the engine runs with, swapped without a restart. ``status_of`` computes each
object's status (conditions + observedGeneration + coveredWorkloads); the shell patches it on change.

Name clashes. A Slurm job selects a policy by name only (``policy=NAME``), but RecoveryPolicy objects
are namespaced, so one name can be used in several namespaces. Exactly one of them is in force, by
this rule (``PolicyBook.verdicts``), the same whatever order the objects arrive in:

1. the policy in the operator's own namespace (``--workload-namespace``, where it also creates the
   WorkloadRecovery objects: the namespace of whoever runs Trainguard) wins;
2. otherwise the oldest (``metadata.creationTimestamp``) wins, so creating a policy in another team's
   namespace can never take over the jobs of an existing one;
3. ties (same second) are broken by namespace name.

The others are not in force: ``Accepted=False``/``Invalid=True`` with reason ``DuplicateName``. Every
policy of a clash, the winner too, gets ``Conflicting=True`` whose message names the policy in force
and the rule that chose it; a policy without a clash has ``Conflicting=False``.

Tenancy. The operator's own namespace (``home``) is the admin's: a policy there may cover workloads of
every namespace and Slurm jobs. A policy in any other namespace is a tenant's: it covers only Kubernetes
workloads of its own namespace, never another team's and never a Slurm job, whatever its selector
says and even when a job names it (``loader.PolicySet``, docs/policy.md "Routing"). The name clash
rule above still keeps one policy in force per name across namespaces.
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
NAME_CLASH: Final = "NameClash"
"""Conflicting=True: several policies are selected by the same name; the message names the one in force."""
NO_CLASH: Final = "NoClash"
"""Conflicting=False: no other policy is selected by this policy's name."""

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
    created: str = ""
    """``metadata.creationTimestamp`` (RFC 3339, UTC: sorts as text); empty if unknown."""


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
        created=str(metadata.get("creationTimestamp") or ""),
    )


@dataclass
class PolicyBook:
    """All RecoveryPolicy objects the operator watches, keyed by (namespace, name)."""

    entries: dict[Key, Entry] = field(default_factory=dict)
    home: str = ""
    """The operator's own namespace: its policy wins a name clash (rule 1 of the module docstring)."""

    def put(self, entry: Entry) -> None:
        self.entries[entry.key] = entry

    def remove(self, key: Key) -> None:
        self.entries.pop(key, None)

    def _rank(self, key: Key) -> tuple[int, str, str]:
        """Order of precedence in a name clash: home namespace first, then oldest, then namespace."""
        entry = self.entries[key]
        return (0 if key[0] == self.home else 1, entry.created or "~", key[0])

    def _why(self, key: Key) -> str:
        if key[0] == self.home:
            return "it is in the operator's namespace"
        return "it is the oldest" if self.entries[key].created else "of namespace order"

    def verdicts(self) -> dict[Key, tuple[bool, str, str]]:
        """Key -> (accepted, reason, message). Of valid policies selected by the same name, one wins by
        the clash rule (module docstring) and the others are rejected, whatever the event order."""
        result: dict[Key, tuple[bool, str, str]] = {}
        for key, entry in self.entries.items():
            if entry.policy is None:
                result[key] = (False, VALIDATION_FAILED, entry.error or "invalid")
        for name, keys in self._by_name().items():
            winner = keys[0]
            entry = self.entries[winner]
            assert entry.policy is not None
            result[winner] = (True, VALID, f"in force as {name!r}, mode {entry.policy.spec.mode}")
            for other in keys[1:]:
                result[other] = (False, DUPLICATE_NAME,
                                 f"policy name {name!r} is already selected by RecoveryPolicy {winner[0]}/{winner[1]}, "
                                 f"which is in force because {self._why(winner)}")
        return result

    def conflicts(self) -> dict[Key, str]:
        """Key -> message, for every valid policy whose name another valid policy also uses."""
        result: dict[Key, str] = {}
        for name, keys in self._by_name().items():
            if len(keys) < 2:
                continue
            winner = keys[0]
            names = ", ".join(f"{k[0]}/{k[1]}" for k in keys)
            for key in keys:
                result[key] = (f"policy name {name!r} is used by {names}; RecoveryPolicy {winner[0]}/{winner[1]} is in "
                               f"force because {self._why(winner)} (rule: the operator's namespace, then the oldest)")
        return result

    def _by_name(self) -> dict[str, list[Key]]:
        """Selected name -> keys of the valid policies using it, in order of precedence."""
        groups: dict[str, list[Key]] = {}
        for key, entry in self.entries.items():
            if entry.policy is not None:
                groups.setdefault(entry.policy.name, []).append(key)
        return {name: sorted(keys, key=self._rank) for name, keys in groups.items()}

    def policy_set(self) -> loader.PolicySet:
        """The accepted policies, for ``engine.update_policies``: namespaced, with ``home`` as the
        admin namespace, so that a policy of any other namespace covers only its own namespace's
        workloads (tenancy, module docstring)."""
        verdicts = self.verdicts()
        accepted = [
            entry.policy
            for key, entry in sorted(self.entries.items())
            if entry.policy is not None and verdicts[key][0]
        ]
        return loader.PolicySet(tuple(accepted), home=self.home)


def status_of(
    entry: Entry,
    verdict: tuple[bool, str, str],
    covered: int,
    previous: policy_status.RecoveryPolicyStatus | None,
    now: datetime.datetime,
    *,
    conflict: str | None = None,
) -> policy_status.RecoveryPolicyStatus:
    """The status one policy should have (transition times kept while a condition holds).

    ``conflict`` is the clash message of ``PolicyBook.conflicts`` (None: no clash); an invalid
    policy gets no Conflicting condition, as it selects nothing."""
    accepted, reason, message = verdict
    before = {c.type: c for c in (previous.conditions if previous is not None else [])}
    T, F = condition.ConditionStatus.TRUE, condition.ConditionStatus.FALSE

    def make(type_: str, status: condition.ConditionStatus, why: str = reason,
             text: str = message) -> condition.Condition:
        old = before.get(type_)
        since = old.last_transition_time if old is not None and old.status == status else now
        return condition.Condition(type=type_, status=status, reason=why, message=text[:32768],
                                   observed_generation=entry.generation, last_transition_time=since)

    # Ready mirrors Accepted (same reason and message): in force is all a policy can be.
    conditions = [make(condition.ACCEPTED, T if accepted else F), make(condition.INVALID, F if accepted else T),
                  make(condition.READY, T if accepted else F)]
    if entry.policy is not None:
        conditions.append(
            make(condition.CONFLICTING, T, NAME_CLASH, conflict) if conflict is not None
            else make(condition.CONFLICTING, F, NO_CLASH, f"no other policy is selected by {entry.policy.name!r}"))
    return policy_status.RecoveryPolicyStatus(
        observed_generation=entry.generation,
        covered_workloads=covered if accepted else 0,
        conditions=conditions,
    )


def parse_status(raw: Any) -> policy_status.RecoveryPolicyStatus | None:
    if not isinstance(raw, Mapping) or not raw:
        return None
    try:
        return policy_status.RecoveryPolicyStatus.model_validate(raw)
    except ValidationError:
        return None
