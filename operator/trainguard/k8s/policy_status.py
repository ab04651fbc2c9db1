"""The status of a RecoveryPolicy object: whether the operator accepted it, and how much it covers.

Place in the loop: reporting. The policy's ``spec`` schema is owned by ``policy/model.py``; this is
the part only the operator writes. ``k8s/crds.py`` derives the CRD's status schema from it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from trainguard.k8s import condition


class RecoveryPolicyStatus(BaseModel):
    """Written by the operator after reading a policy (Accepted or Invalid, with the reason)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)

    observed_generation: int | None = Field(
        default=None, ge=0, description="metadata.generation of the spec the conditions describe."
    )
    covered_workloads: int = Field(default=0, ge=0, description="Workloads currently watched under this policy.")
    conditions: list[condition.Condition] = Field(
        default_factory=list,
        max_length=condition.MAX_CONDITIONS,
        description="Accepted (in force) or Invalid (rejected, with the reason in the message).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
