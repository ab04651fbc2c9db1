"""Status conditions of our custom resources, in the standard ``metav1.Condition`` shape.

Place in the loop: the last step, reporting. The kopf handlers (``k8s/handlers.py``, later) write
these into ``status.conditions`` of RecoveryPolicy and WorkloadRecovery; ``k8s/crds.py`` derives the
CRD schema from the ``Condition`` model below, so the shape is written once. Field rules mirror
upstream ``k8s.io/apimachinery/pkg/apis/meta/v1`` ``Condition``
(https://github.com/kubernetes/apimachinery/blob/master/pkg/apis/meta/v1/types.go), so
``kubectl wait --for=condition=Accepted`` and Argo CD health checks read them like any other.
"""

from __future__ import annotations

import datetime
import enum
from typing import Annotated, Final

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, PlainSerializer, WithJsonSchema
from pydantic.alias_generators import to_camel

from trainguard.model import times

# Condition types (closed vocabulary; the values are part of the CRDs' contract).
ACCEPTED: Final = "Accepted"
"""RecoveryPolicy: the spec was read and is in force for the workloads it covers."""
INVALID: Final = "Invalid"
"""RecoveryPolicy: the spec was rejected (e.g. an operator pattern that is not portable); not in force."""
CONFLICTING: Final = "Conflicting"
"""RecoveryPolicy: another RecoveryPolicy is selected by the same name; the message names the one in force
(the clash rule is in ``k8s/policies.py`` and docs/operator.md)."""
POLICY_RESOLVED: Final = "PolicyResolved"
"""WorkloadRecovery: the named RecoveryPolicy exists and is Accepted."""
DEGRADED: Final = "Degraded"
"""WorkloadRecovery: an anomaly is open on the current attempt."""
CONVERGED: Final = "Converged"
"""WorkloadRecovery: the latest advice generation reached its desired state (or was only recorded)."""
READY: Final = "Ready"
"""Both kinds: the summary condition kstatus-style tools (``kubectl wait --for=condition=Ready``, Flux,
Argo CD's health scripts in ``deploy/argocd``) read. True: the object is in force (RecoveryPolicy) or the
workload needs nothing from anyone (WorkloadRecovery); False: the reason says what is open. Its
``observedGeneration``, with ``status.observedGeneration``, tells a stale status from a current one."""

MAX_CONDITIONS: Final = 16
"""Bound of ``status.conditions``; the list is a map keyed by ``type`` and we define six types."""


def format_time(value: datetime.datetime) -> str:
    """RFC 3339 in UTC with second precision and a ``Z``: the wire form of ``metav1.Time``."""
    return times.rfc3339(value)


Timestamp = Annotated[
    AwareDatetime,
    PlainSerializer(format_time, return_type=str),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]
"""A timezone-aware time in Python, ``metav1.Time`` (``2025-01-31T12:00:00Z``) on the wire."""


class ConditionStatus(enum.StrEnum):
    """``metav1.ConditionStatus``."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(BaseModel):
    """One entry of ``status.conditions`` (``metav1.Condition``, same bounds and patterns)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)

    type: str = Field(
        max_length=316,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
        description="Condition type in CamelCase, e.g. Accepted.",
    )
    status: ConditionStatus = Field(description="True, False or Unknown.")
    observed_generation: int | None = Field(
        default=None, ge=0, description="metadata.generation the condition was computed from."
    )
    last_transition_time: Timestamp = Field(description="When status last changed.")
    reason: str = Field(
        min_length=1,
        max_length=1024,
        pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        description="Machine-readable CamelCase reason for the last transition.",
    )
    message: str = Field(max_length=32768, description="Human-readable details; may be empty.")
