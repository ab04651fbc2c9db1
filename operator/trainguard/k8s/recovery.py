"""WorkloadRecovery: one Kubernetes object per watched workload, the loop's state as users see it.

Place in the loop: the last step, reporting (``kubectl get recoveries``). The operator creates one
WorkloadRecovery per opted-in workload (a Slurm job or a JobSet), writes the engine's view into its
``status`` (phase, attempt, last anomaly and verdict, current advice and its disposition, recent
history, the policy the job selected) and garbage-collects it when the workload is gone. ``spec``
names the workload and holds the per-workload overrides, which the operator applies (every field of
``Overrides`` reaches the engine: ``engine_overrides``).

These pydantic models are the single source of the CRD schema: ``k8s/crds.py`` generates the
OpenAPI (and the CEL rules below, which are data here, so the Python check and the apiserver check
come from the same regexes). The phase is an Enum with a transition table and a guard that raises,
so a handler cannot write an impossible history into status.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator
from pydantic.alias_generators import to_camel

from trainguard.k8s import condition
from trainguard.model import actions, vocab
from trainguard.policy import model as policy_model

API_VERSION: Final = "trainguard.dev/v1alpha1"
GROUP: Final = "trainguard.dev"
VERSION: Final = "v1alpha1"
KIND: Final = "WorkloadRecovery"
PLURAL: Final = "workloadrecoveries"

MAX_RECENT: Final = 10
"""Bound of ``recentAnomalies`` and ``recentActions``: the audit log keeps everything; status
keeps what fits on one ``kubectl describe`` screen and well under etcd's object size limit."""

MAX_NODES: Final = 64
"""Bound of node lists; equals the policy's upper bound of ``exclusion.maxExcludedNodesPerJob``."""

MAX_REASONS: Final = 10
MAX_TEXT: Final = 1024


class Phase(enum.StrEnum):
    """Where a watched workload stands, as shown in the Phase column."""

    RUNNING = "Running"
    """Running, no open anomaly."""
    DEGRADED = "Degraded"
    """Running with an open anomaly (e.g. a straggler) and no recovery under way."""
    RECOVERING = "Recovering"
    """An advice generation is being carried out (requeue, exclusion, release)."""
    HELD = "Held"
    """Held, by our advice or between requeue-hold and release. The watchdog never leaves it here."""
    STOPPED = "Stopped"
    """Cancelled on our advice (retrying could not help) or by its owner."""
    SUCCEEDED = "Succeeded"
    """Finished successfully."""
    FAILED = "Failed"
    """Ended in failure with no retry left; the scheduler or a human may still requeue it."""


TERMINAL: Final = frozenset({Phase.STOPPED, Phase.SUCCEEDED})
"""Phases nothing leaves. Failed is not one: ``scontrol requeue`` works on a FAILED batch job."""

TRANSITIONS: Final[Mapping[Phase, frozenset[Phase]]] = {
    Phase.RUNNING: frozenset(
        {Phase.DEGRADED, Phase.RECOVERING, Phase.HELD, Phase.STOPPED, Phase.SUCCEEDED, Phase.FAILED}
    ),
    Phase.DEGRADED: frozenset(
        {Phase.RUNNING, Phase.RECOVERING, Phase.HELD, Phase.STOPPED, Phase.SUCCEEDED, Phase.FAILED}
    ),
    # back to Degraded when the watchdog abandons a recovery of a job that is still running
    Phase.RECOVERING: frozenset(
        {Phase.RUNNING, Phase.DEGRADED, Phase.HELD, Phase.STOPPED, Phase.SUCCEEDED, Phase.FAILED}
    ),
    # a held job is pending: it must be released (Recovering/Running) or cancelled before anything else
    Phase.HELD: frozenset({Phase.RECOVERING, Phase.RUNNING, Phase.STOPPED, Phase.FAILED}),
    Phase.FAILED: frozenset({Phase.RECOVERING, Phase.RUNNING}),
    Phase.STOPPED: frozenset(),
    Phase.SUCCEEDED: frozenset(),
}
"""Phase -> phases it may move to. Staying in the same phase is always allowed (status rewrites)."""


class PhaseTransitionError(ValueError):
    """A status update tried a transition that ``TRANSITIONS`` forbids."""


def allowed(source: Phase | None, target: Phase) -> bool:
    """Whether ``source -> target`` is allowed; ``None`` (no status yet) may go anywhere, since the
    operator can discover a workload in any state."""
    if source is None or source == target:
        return True
    return target in TRANSITIONS[source]


def transition(source: Phase | None, target: Phase) -> Phase:
    """``target`` if the move is allowed; else PhaseTransitionError naming both phases."""
    if not allowed(source, target):
        assert source is not None
        permitted = ", ".join(sorted(TRANSITIONS[source])) or "none (terminal)"
        raise PhaseTransitionError(f"phase {source} cannot become {target}; allowed from {source}: {permitted}")
    return target


class WorkloadKind(enum.StrEnum):
    """Kinds of workload Trainguard watches. Only what the operator serves today: a kind is added
    here (and to ``ID_PATTERNS``) with the scheduler adapter that recovers it, so the schema never
    accepts a WorkloadRecovery nothing acts on. JobSet and PyTorchJob: ``k8s/kubejobs``; their
    WorkloadRecovery lives in the workload's namespace, owned by it (garbage-collected with it)."""

    SLURM_JOB = "SlurmJob"
    JOBSET = "JobSet"
    PYTORCH_JOB = "PyTorchJob"


ID_PATTERNS: Final[Mapping[WorkloadKind, tuple[str, str]]] = {
    WorkloadKind.SLURM_JOB: (
        r"^[0-9]{1,10}(_[0-9]{1,10})?$",
        "a SlurmJob id is a Slurm job id such as 1234, or 1234_7 for an array task",
    ),
    WorkloadKind.JOBSET: (
        r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$",
        "a JobSet id is the JobSet's name (in the WorkloadRecovery's namespace)",
    ),
    WorkloadKind.PYTORCH_JOB: (
        r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$",
        "a PyTorchJob id is the PyTorchJob's name (in the WorkloadRecovery's namespace)",
    ),
}
"""Kind -> (regex of ``workload.id``, message). Checked by pydantic and, as CEL, by the apiserver."""


def _id_rules() -> list[JsonValue]:
    """CEL rules of ``workload``: the id fits its kind (from ``ID_PATTERNS``), and it never changes."""
    rules: list[JsonValue] = [
        {"rule": f"self.kind != '{kind}' || self.id.matches('{pattern}')", "message": message}
        for kind, (pattern, message) in ID_PATTERNS.items()
    ]
    rules.append({"rule": "self == oldSelf", "message": "workload is immutable: create a new WorkloadRecovery"})
    return rules


class _Section(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


NodeName = Annotated[str, Field(min_length=1, max_length=253)]
Text = Annotated[str, Field(max_length=MAX_TEXT)]


class WorkloadRef(_Section):
    """The workload this object reports on."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": _id_rules()})

    kind: WorkloadKind = Field(description="SlurmJob (plain Slurm or Slinky), JobSet or PyTorchJob.")
    cluster: str = Field(
        default="",
        max_length=253,
        pattern=r"^([A-Za-z0-9][-A-Za-z0-9_./]{0,252})?$",
        description="Scheduler the workload runs on: the Slurm ClusterName, or the Slinky Controller as "
        "namespace/name. Empty: the operator's only scheduler.",
    )
    id: str = Field(
        min_length=1,
        max_length=253,
        description="The Slurm job id (1234, or 1234_7 for an array task); for a JobSet or PyTorchJob, its "
        "name in the WorkloadRecovery's namespace.",
    )

    @model_validator(mode="after")
    def _id_matches_kind(self) -> WorkloadRef:
        pattern, message = ID_PATTERNS[self.kind]
        if not re.fullmatch(pattern, self.id):
            raise ValueError(f"{message}, got {self.id!r}")
        return self

    @property
    def display(self) -> str:
        """Short name for logs and Events, e.g. ``SlurmJob/1234``."""
        return f"{self.kind}/{self.id}"


def _override(field: str) -> str:
    return f"Overrides the policy's {field} for this workload; unset: the policy's value."


class Overrides(_Section):
    """Per-workload overrides of policy fields, applied by the engine on top of the job comment's
    overrides and by the same rules: budgets (retries, exclusions) can only be lowered below the
    policy's, and detection settings apply from the next attempt.

    The bounds are the policy's own (a unit test compares them with the policy schema)."""

    mode: vocab.Mode | None = Field(
        default=None,
        description="Monitor forces Monitor mode. Action never raises authority: the workload then "
        "follows its policy, and only a policy can act.",
    )
    max_retries: int | None = Field(default=None, ge=0, le=100, description=_override("retries.maxRetries"))
    max_attempts_without_checkpoint: int | None = Field(
        default=None, ge=1, le=100, description=_override("retries.maxAttemptsWithoutCheckpoint")
    )
    hang_timeout: policy_model.Duration | None = Field(default=None, description=_override("detection.hangTimeout"))
    max_excluded_nodes_per_job: int | None = Field(
        default=None, ge=0, le=MAX_NODES, description=_override("exclusion.maxExcludedNodesPerJob")
    )


ENGINE_KEYS: Final[Mapping[str, str]] = {
    "max_retries": "max-retries",
    "max_attempts_without_checkpoint": "max-attempts-without-checkpoint",
    "hang_timeout": "hang-timeout",
    "max_excluded_nodes_per_job": "max-excluded-nodes",
}
"""``Overrides`` field -> the engine's override key (the opt-in comment's); ``mode`` goes its own way."""


def engine_overrides(raw: Any) -> tuple[vocab.Mode | None, dict[str, Any]]:
    """The forced mode and the other overrides of a WorkloadRecovery's ``spec.overrides`` (as read
    from the API), in the engine's keys. Values the schema rejects raise pydantic's ValidationError."""
    parsed = Overrides.model_validate(raw or {})
    mode = vocab.Mode.MONITOR if parsed.mode == vocab.Mode.MONITOR else None
    values = {key: getattr(parsed, field) for field, key in ENGINE_KEYS.items() if getattr(parsed, field) is not None}
    return mode, values


class WorkloadRecoverySpec(_Section):
    """What is watched, and the per-workload overrides (the policy in force is status: the job selects it)."""

    workload: WorkloadRef = Field(description="The watched workload; immutable.")
    overrides: Overrides = Field(default_factory=Overrides, description="Per-workload overrides.")


class AnomalySummary(_Section):
    """One detected anomaly with its verdict, as shown in status (the audit log has the evidence)."""

    time: condition.Timestamp = Field(description="When it was detected.")
    attempt: int = Field(ge=0, description="Attempt of the workload it happened in.")
    symptom: vocab.Symptom = Field(description="crash, hang, straggler.")
    category: vocab.Category = Field(description="Failure category of the first cause.")
    verdict: vocab.Attribution = Field(description="Attribution: hardware, system, application or unknown.")
    nodes: list[NodeName] = Field(default_factory=list, max_length=MAX_NODES, description="Suspect nodes.")
    pattern: str | None = Field(default=None, max_length=253, description="Catalog pattern id of the first cause.")


class AdviceSummary(_Section):
    """The current advice generation and where its reconciliation stands."""

    action: vocab.AdviceAction = Field(description="Desired state: requeue, hold, stop or none.")
    generation: int = Field(ge=1, description="Advice generation; actions are keyed by (attempt, generation).")
    mode: vocab.Mode = Field(description="Mode it was decided in; Monitor advice is recorded, never carried out.")
    disposition: vocab.Disposition = Field(description="Pending, Converged, Abandoned, or Monitored.")
    exclude_nodes: list[NodeName] = Field(default_factory=list, max_length=MAX_NODES, description="Nodes to avoid.")
    reasons: list[Text] = Field(default_factory=list, max_length=MAX_REASONS, description="Why, in words.")
    deadline: condition.Timestamp | None = Field(default=None, description="When the watchdog takes over.")


class ActionSummary(_Section):
    """One named executor step, as shown in status."""

    time: condition.Timestamp = Field(description="When the step was recorded.")
    attempt: int = Field(ge=0, description="Attempt of the workload.")
    generation: int = Field(ge=1, description="Advice generation the step belongs to.")
    step: str = Field(min_length=1, max_length=253, description="Step name, e.g. requeue_hold or drain_node:node3.")
    operation: actions.Operation = Field(description="Scheduler operation.")
    status: actions.ActionStatus = Field(description="intent, done, failed or skipped.")
    message: Text = Field(default="", description="Error or note.")


class WorkloadRecoveryStatus(_Section):
    """What the operator last observed and decided. Written only by the operator."""

    observed_generation: int | None = Field(default=None, ge=0, description="metadata.generation last handled.")
    phase: Phase | None = Field(default=None, description="Phase; see the transition table in k8s/recovery.py.")
    policy: str = Field(
        default="",
        max_length=253,
        description="Name of the RecoveryPolicy the job selected (selector.policyName or metadata.name); "
        "see the PolicyResolved condition for whether one is in force.",
    )
    attempt: int = Field(default=0, ge=0, description="Current attempt (Slurm restart count + 1, JobSet restarts + 1).")
    restarts: int = Field(default=0, ge=0, description="Restarts done on our advice.")
    excluded_nodes: list[NodeName] = Field(
        default_factory=list, max_length=MAX_NODES, description="Nodes excluded from this workload so far."
    )
    last_anomaly: AnomalySummary | None = Field(default=None, description="Most recent anomaly and its verdict.")
    advice: AdviceSummary | None = Field(default=None, description="Current advice generation.")
    recent_anomalies: list[AnomalySummary] = Field(
        default_factory=list, max_length=MAX_RECENT, description="Latest anomalies, newest first."
    )
    recent_actions: list[ActionSummary] = Field(
        default_factory=list, max_length=MAX_RECENT, description="Latest executor steps, newest first."
    )
    conditions: list[condition.Condition] = Field(
        default_factory=list,
        max_length=condition.MAX_CONDITIONS,
        description="PolicyResolved, Degraded, Converged.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )


class Metadata(BaseModel):
    """The part of object metadata these models read."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str = Field(min_length=1, max_length=253)
    namespace: str | None = None


class WorkloadRecovery(BaseModel):
    """A whole WorkloadRecovery object, as read from a file or the API."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    api_version: Literal["trainguard.dev/v1alpha1"] = Field(default=API_VERSION, alias="apiVersion")
    kind: Literal["WorkloadRecovery"] = KIND
    metadata: Metadata
    spec: WorkloadRecoverySpec
    status: WorkloadRecoveryStatus | None = None


def parse(document: Any) -> WorkloadRecovery:
    """A WorkloadRecovery from a decoded YAML/JSON document; pydantic ValidationError if invalid."""
    return WorkloadRecovery.model_validate(document)
