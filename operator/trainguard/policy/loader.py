"""Loads RecoveryPolicies from YAML (``trainguard run --policy FILE``, the Helm values, Git).

Place in the loop: read once at start (and on change) by the engine/CLI; the result feeds
``policy.decide``. A file holds one or many YAML documents; each is either a full object
(``kind: RecoveryPolicy`` with ``metadata``/``spec``, exactly what ``kubectl apply`` takes) or a
bare spec. A bare spec is named by ``selector.policyName``, else ``default``. Every problem is a
``PolicyError`` whose message names the document and the field path (``spec.retries.maxRetries``),
never a traceback.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from trainguard.policy import model

DEFAULT_NAME = "default"
"""Name of a bare spec without ``selector.policyName``; jobs that say just ``trainguard`` get it."""

_MAX_FILE_BYTES = 4 * 1024 * 1024


class PolicyError(ValueError):
    """A policy file or document is invalid; the message says where and why."""


@dataclass(frozen=True)
class PolicySet:
    """Policies by the name jobs select them with (``RecoveryPolicy.name``)."""

    policies: tuple[model.RecoveryPolicy, ...]

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

    def select(
        self, name: str | None, *, partition: str = "", namespace: str = ""
    ) -> tuple[model.RecoveryPolicy | None, str]:
        """The policy covering a job, or None and the reason to record on the workload."""
        policy = self.get(name)
        if policy is None:
            return None, f"no RecoveryPolicy named {name or DEFAULT_NAME!r} (known: {', '.join(self.names())})"
        selector = policy.spec.selector
        if selector.partitions and partition not in selector.partitions:
            return None, f"policy {policy.name!r} does not cover partition {partition!r}"
        if selector.namespaces and namespace not in selector.namespaces:
            return None, f"policy {policy.name!r} does not cover namespace {namespace!r}"
        return policy, f"policy {policy.name!r}"


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
        documents = list(yaml.safe_load_all(text))
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
