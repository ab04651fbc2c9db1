"""Loads RecoveryPolicies from YAML (``trainguard run --policy FILE``, the Helm values, Git).

Place in the loop: read once at start (and on change) by the engine/CLI; the result feeds
``policy.decide``. A file holds one or many YAML documents; each is either a full object
(``kind: RecoveryPolicy`` with ``metadata``/``spec``, exactly what ``kubectl apply`` takes) or a
bare spec. A bare spec is named by ``selector.policyName``, else ``default``. Every problem is a
``PolicyError`` whose message names the document and the field path (``spec.retries.maxRetries``),
never a traceback. A key given twice in one mapping is refused (``model.yamlload``): PyYAML alone
would keep the last one silently, e.g. a ``mode: Action`` below the ``mode: Monitor`` a reviewer read.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from trainguard.model import routing, workloads, yamlload
from trainguard.policy import model

DEFAULT_NAME = "default"
"""Name of a bare spec without ``selector.policyName``; the fallback route of a job that names no
policy when no selector covers it more specifically."""

MAX_CANDIDATES = 20
"""Candidates kept in a recorded Route: enough to see a tie, small enough for every advice row."""

_MAX_FILE_BYTES = 4 * 1024 * 1024


class PolicyError(ValueError):
    """A policy file or document is invalid; the message says where and why."""


@dataclass(frozen=True)
class PolicySet:
    """Policies by the name jobs select them with (``RecoveryPolicy.name``).

    Tenancy (docs/policy.md "Routing"). ``home`` is the admin namespace when the policies are
    namespaced RecoveryPolicy objects (the operator's own namespace, ``k8s/policies.PolicyBook``): a
    policy there, like a policy without a namespace, may cover workloads of every namespace and Slurm
    jobs; a policy of any other namespace is a tenant's and covers only Kubernetes workloads of its
    own namespace (``JobSnapshot.namespace``), never a Slurm job (which has no namespace). None: the
    policies are files (``trainguard run``), not namespaced; ``metadata.namespace`` plays no part.
    """

    policies: tuple[model.RecoveryPolicy, ...]
    home: str | None = None

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for policy in self.policies:
            if policy.name in seen:
                raise PolicyError(f"two policies are selected by the name {policy.name!r}")
            seen.add(policy.name)

    def get(self, name: str | None) -> model.RecoveryPolicy | None:
        """The policy a job selects (``None``: the one named ``default``), or None if there is none."""
        wanted = name or DEFAULT_NAME
        return next((policy for policy in self.policies if policy.name == wanted), None)

    def names(self) -> list[str]:
        return [policy.name for policy in self.policies]

    def tenant_of(self, policy: model.RecoveryPolicy) -> str | None:
        """The namespace a tenant policy is confined to; None for an admin policy (in ``home``,
        without a namespace, or any policy when the set is not namespaced)."""
        namespace = policy.metadata.namespace
        if self.home is None or not namespace or namespace == self.home:
            return None
        return namespace

    def namespace_of(self, policy: model.RecoveryPolicy) -> str | None:
        """The policy's namespace as recorded in a Route: None when the set is not namespaced."""
        return policy.metadata.namespace if self.home is not None else None

    def outside_tenancy(self, policy: model.RecoveryPolicy, job: workloads.JobSnapshot) -> str:
        """Why ``policy`` may not cover ``job`` whatever its selector says, or "" if it may."""
        tenant = self.tenant_of(policy)
        if tenant is None or tenant == job.namespace:
            return ""
        where = (f"of namespace {job.namespace!r}" if job.namespace
                 else "without a namespace (a Slurm job)")
        return (f"RecoveryPolicy {tenant}/{policy.metadata.name} is a tenant policy: it covers only Kubernetes "
                f"workloads of namespace {tenant!r}, not a workload {where}; a policy for every namespace "
                f"belongs in the operator's namespace {self.home!r}")

    def select(
        self, name: str | None, *, partition: str = "", namespace: str = ""
    ) -> tuple[model.RecoveryPolicy | None, str]:
        """``route`` for a job known only by its partition and namespace; (policy, reason)."""
        job = workloads.JobSnapshot(workload="", job_id="", state=workloads.JobState.UNKNOWN, partition=partition,
                                    namespace=namespace)
        policy, route = self.route(name, job)
        return policy, route.reason

    def route(
        self, name: str | None, job: workloads.JobSnapshot
    ) -> tuple[model.RecoveryPolicy | None, routing.Route]:
        """The policy covering ``job`` and the routing decision to record (docs/policy.md "Routing").

        A job that names a policy (``policy=NAME``) gets that policy, or none when its selector
        excludes the job: naming a policy never widens what it covers. A job that names none gets
        the most specific policy whose selector covers it: specificity is the number of selector
        dimensions set (partitions, accounts, users, qos, namespaces, one per label key); a tie goes
        to the higher ``selector.priority``; a tie on both is ambiguous and covers nothing, because
        acting under a policy picked by accident is worse than recording the conflict. A policy
        with an empty selector is reached only by its name, except the one named ``default``,
        which is the fallback of specificity 0: adding a policy for one team never captures
        everybody else's jobs. Before any of this, tenancy (class docstring): a tenant policy is no
        candidate for a workload outside its namespace, even when the job names it.
        """
        if name:
            policy = self.get(name)
            if policy is None:
                return None, routing.Route(
                    policy=None, explicit=True,
                    reason=f"no RecoveryPolicy named {name!r} (known: {', '.join(self.names()) or 'none'})",
                )
            foreign = self.outside_tenancy(policy, job)
            if foreign:
                return None, routing.Route(
                    policy=None, explicit=True, reason=f"the job names policy {policy.name!r}, but {foreign}",
                )
            excluded = excludes(policy.spec.selector, job)
            if excluded:
                return None, routing.Route(
                    policy=None, explicit=True,
                    reason=f"the job names policy {policy.name!r}, but that policy's selector {excluded}",
                )
            return policy, routing.Route(
                policy=policy.name, namespace=self.namespace_of(policy), explicit=True,
                reason=f"named by the job (policy={name})", candidates=[_candidate(policy)],
            )
        selected = [policy for policy in self.policies if _routable(policy) and not excludes(policy.spec.selector, job)]
        others = [policy for policy in selected if self.outside_tenancy(policy, job)]
        covering = sorted((policy for policy in selected if policy not in others), key=_rank)
        candidates = [_candidate(policy) for policy in covering[:MAX_CANDIDATES]]
        skipped = _skipped(others, job)
        if not covering:
            return None, routing.Route(
                policy=None,
                reason=f"no policy's selector covers the job ({describe(job)}) and no policy is named "
                f"{DEFAULT_NAME!r}{skipped}",
            )
        best = covering[0]
        tied = [p for p in covering if _rank(p)[:2] == _rank(best)[:2]]
        if len(tied) > 1:
            names = ", ".join(repr(p.name) for p in tied)
            return None, routing.Route(
                policy=None, candidates=candidates,
                reason=f"ambiguous: {names} cover the job equally (specificity {best.spec.selector.dimensions()}, "
                f"priority {best.spec.selector.priority}); narrow a selector or set selector.priority{skipped}",
            )
        selector = best.spec.selector
        if selector.dimensions() == 0:
            why = f"the {DEFAULT_NAME!r} policy: no selector covers the job more specifically"
        else:
            why = (f"most specific selector covering the job ({_matched(selector, job)}; "
                   f"specificity {selector.dimensions()})")
            if len(covering) > 1:
                why += f" over {', '.join(repr(p.name) for p in covering[1:4])}" + (" ..." if len(covering) > 4 else "")
        return best, routing.Route(policy=best.name, namespace=self.namespace_of(best), reason=why + skipped,
                                   candidates=candidates)


def _skipped(foreign: Sequence[model.RecoveryPolicy], job: workloads.JobSnapshot) -> str:
    """The tenant policies whose selectors cover ``job`` but whose namespace is not the job's, for
    the reason: who tried to cover the workload is part of the audit trail."""
    if not foreign:
        return ""
    named = ", ".join(f"{p.metadata.namespace}/{p.metadata.name}" for p in sorted(foreign, key=_rank)[:3])
    more = " ..." if len(foreign) > 3 else ""
    why = (f"tenant policies of namespaces other than {job.namespace!r}" if job.namespace
           else "tenant policies, which cover no Slurm job")
    return f"; not eligible ({why}): {named}{more}"


def _routable(policy: model.RecoveryPolicy) -> bool:
    return policy.spec.selector.dimensions() > 0 or policy.name == DEFAULT_NAME


def _rank(policy: model.RecoveryPolicy) -> tuple[int, int, str]:
    selector = policy.spec.selector
    return -selector.dimensions(), -selector.priority, policy.name


def _candidate(policy: model.RecoveryPolicy) -> routing.Candidate:
    selector = policy.spec.selector
    return routing.Candidate(policy=policy.name, specificity=selector.dimensions(), priority=selector.priority)


def partitions_of(job: workloads.JobSnapshot) -> list[str]:
    """The partitions a job may run in (a pending job may name several, ``a,b``)."""
    return [p.strip() for p in job.partition.split(",") if p.strip()]


def excludes(selector: model.Selector, job: workloads.JobSnapshot) -> str:
    """Why ``selector`` does not cover ``job`` (``does not cover account 'x'``), or "" if it does.

    A job submitted to several partitions is covered only if the selector lists every one of
    them: wherever it starts, it must start under this policy.
    """
    if selector.partitions:
        parts = partitions_of(job)
        if not parts or any(p not in selector.partitions for p in parts):
            return f"does not cover partition {job.partition!r}"
    for wanted, value, what in (
        (selector.accounts, job.account, "account"),
        (selector.users, job.user, "user"),
        (selector.qos, job.qos, "QOS"),
        (selector.namespaces, job.namespace, "namespace"),
    ):
        if wanted and value not in wanted:
            return f"does not cover {what} {value!r}"
    for key, value in sorted(selector.labels.items()):
        if job.labels.get(key) != value:
            return f"requires label {key}={value!r}"
    return ""


def _matched(selector: model.Selector, job: workloads.JobSnapshot) -> str:
    parts = []
    for wanted, value, what in (
        (selector.partitions, job.partition, "partition"),
        (selector.accounts, job.account, "account"),
        (selector.users, job.user, "user"),
        (selector.qos, job.qos, "QOS"),
        (selector.namespaces, job.namespace, "namespace"),
    ):
        if wanted:
            parts.append(f"{what} {value!r}")
    parts.extend(f"label {key}={value!r}" for key, value in sorted(selector.labels.items()))
    return ", ".join(parts)


def describe(job: workloads.JobSnapshot) -> str:
    """The routing attributes a job has, for reasons: ``partition 'debug', account 'ml', user 'alice'``."""
    parts = [
        f"{what} {value!r}"
        for what, value in (
            ("partition", job.partition), ("account", job.account), ("user", job.user), ("QOS", job.qos),
            ("namespace", job.namespace),
        )
        if value
    ]
    parts.extend(f"label {key}={value!r}" for key, value in sorted(job.labels.items())[:5])
    return ", ".join(parts) or "no partition, account, user, QOS, namespace or label"


def format_errors(exc: ValidationError, prefix: str) -> str:
    """One line per problem: ``prefix.field.path: message``."""
    lines = []
    for error in exc.errors(include_url=False):
        path = ".".join(str(part) for part in (prefix, *error["loc"]) if part != "")
        lines.append(f"{path}: {error['msg']}")
    return "; ".join(lines)


def parse_document(document: Any, origin: str) -> model.RecoveryPolicy:
    """One YAML document (already parsed) as a policy."""
    if not isinstance(document, dict):
        raise PolicyError(f"{origin}: expected a mapping (a RecoveryPolicy or a spec), got {type(document).__name__}")
    if "kind" in document or "metadata" in document or "apiVersion" in document:
        if document.get("kind") != model.KIND:
            raise PolicyError(f"{origin}: kind must be {model.KIND!r}, got {document.get('kind')!r}")
        try:
            return model.RecoveryPolicy.model_validate(document)
        except ValidationError as exc:
            raise PolicyError(f"{origin}: {format_errors(exc, '')}") from None
    try:
        spec = model.RecoveryPolicySpec.model_validate(document)
    except ValidationError as exc:
        raise PolicyError(f"{origin}: {format_errors(exc, 'spec')}") from None
    name = spec.selector.policy_name or DEFAULT_NAME
    try:
        metadata = model.Metadata(name=name)
    except ValidationError as exc:
        raise PolicyError(
            f"{origin}: spec.selector.policyName {name!r} is not a valid name ({exc.errors()[0]['msg']})"
        ) from None
    return model.RecoveryPolicy(metadata=metadata, spec=spec)


def parse_text(text: str, origin: str = "<policy>") -> PolicySet:
    """All policies in a YAML text (``---`` separated documents; empty documents are skipped)."""
    try:
        documents = list(yamlload.load_all(text))
    except yamlload.DuplicateKeyError as exc:
        raise PolicyError(f"{origin}: {exc}") from None
    except yaml.YAMLError as exc:
        raise PolicyError(f"{origin}: not valid YAML: {exc}") from None
    policies = [
        parse_document(document, f"{origin} document {index}")
        for index, document in enumerate(documents, start=1)
        if document is not None
    ]
    if not policies:
        raise PolicyError(f"{origin}: no policy found")
    try:
        return PolicySet(tuple(policies))
    except PolicyError as exc:
        raise PolicyError(f"{origin}: {exc}") from None


def load_file(path: Path) -> PolicySet:
    """All policies in one YAML file."""
    try:
        if path.stat().st_size > _MAX_FILE_BYTES:
            raise PolicyError(f"{path}: larger than {_MAX_FILE_BYTES} bytes; not a policy file")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError(f"{path}: cannot read: {exc}") from None
    return parse_text(text, str(path))


def load_files(paths: Sequence[Path]) -> PolicySet:
    """Policies from several files; a name defined twice is an error."""
    return PolicySet(tuple(_chain(load_file(path).policies for path in paths)))


def _chain(groups: Iterable[tuple[model.RecoveryPolicy, ...]]) -> list[model.RecoveryPolicy]:
    return [policy for group in groups for policy in group]
