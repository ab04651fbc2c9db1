"""Route: which RecoveryPolicy covers a workload, and why (the routing decision, as recorded).

Produced by ``policy.loader.PolicySet.route`` when the engine starts tracking a workload (and
whenever the policies change); the engine keeps it on the workload and writes it into every
Advice it records, so the audit trail shows under which policy, chosen how, each decision was
made. Lives in ``model`` because the policy stage produces it and the store and the shells read it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Candidate(BaseModel):
    """A policy whose selector covers the workload."""

    model_config = ConfigDict(frozen=True)

    policy: str
    specificity: int
    """Selector dimensions set (partitions, accounts, users, qos, namespaces; each label key counts one)."""
    priority: int = 0


class Route(BaseModel):
    """The routing decision for one workload.

    ``policy`` is None when no policy covers the workload; ``reason`` then says why (no policy
    of that name, the named policy is a tenant policy of another namespace, the named policy's
    selector excludes the job, no selector matches, or an ambiguous tie). ``explicit`` is true when
    the job named its policy (``policy=NAME``). The reason also names the tenant policies whose
    selectors cover the workload but which are not eligible (docs/policy.md "Routing", tenancy).
    """

    model_config = ConfigDict(frozen=True)

    policy: str | None
    reason: str
    namespace: str | None = None
    """Namespace of the RecoveryPolicy object chosen (operator); None for policy files (``trainguard run``)."""
    explicit: bool = False
    candidates: list[Candidate] = Field(default_factory=list)
    """Every policy whose selector covers the workload, most specific first (at most 20 kept)."""
