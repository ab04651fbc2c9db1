"""RecoveryPolicy: the operator-approved rules under which Trainguard may act, as one pydantic schema.

Place in the loop: the policy stage (``policy.decide``, ``policy.blast_radius``) reads it to turn a
Verdict into Advice; detection reads ``detection``; the executor reads ``actions``/``watchdog``.
This module is the single source of truth of the schema: policy files (``policy.loader``), the
``RecoveryPolicy`` CRD (generated from ``crd_openapi_schema()``) and per-job overrides
(``policy.overrides``) all validate against it, and every default lives here and nowhere else.

Field names are camelCase in YAML/CRDs (aliases) and snake_case in Python. Durations are strings
(``30m``, see ``policy.durations``) and float seconds in Python; a field named ``...Seconds`` is a
plain number of seconds.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any, Final, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from trainguard.model import openapi, patterns, user_regex, vocab
from trainguard.policy import fields
from trainguard.policy import validation as validation_mod

API_VERSION = "trainguard.dev/v1alpha1"
"""apiVersion of the RecoveryPolicy CRD. The API group ``trainguard.dev`` is public: manifests in users'
Git repositories name it, so it never changes."""

KIND: Final = "RecoveryPolicy"

DEFAULT_CHECKPOINT_REGEX = r"(?i)(saved checkpoint|saving checkpoint|checkpoint saved)"
"""Matches ``saved checkpoint``/``Saving checkpoint``/``successfully saved checkpoint`` lines (Megatron,
NeMo, Lightning, torch DCP wrappers). ``Saving`` counts because frameworks often print nothing after it."""

Duration = fields.Duration
"""A duration string in files and CRDs, float seconds in Python (``policy.fields``)."""
_duration = fields.duration_default


Regex = Annotated[str, Field(min_length=1, max_length=512), AfterValidator(user_regex.check)]
"""A user's regex: it must compile in the linear-time engine that runs it (``model.user_regex``)."""


class ActionName(enum.StrEnum):
    """An operation a policy may allow. ``drainNode`` is Slurm, ``cordonNode`` Kubernetes."""

    REQUEUE = "requeue"
    HOLD = "hold"
    STOP = "stop"
    DRAIN_NODE = "drainNode"
    CORDON_NODE = "cordonNode"


_Section = fields.Section


class Selector(_Section):
    """Which workloads the policy covers. A job must also opt in. A job that names no policy goes to
    the most specific policy whose selector covers it (``policy.loader.PolicySet.route``); a job
    that names this policy is refused if the selector excludes it."""

    policy_name: str | None = Field(
        default=None,
        max_length=253,
        description="Name a job selects with 'policy=NAME' (Slurm comment) or the trainguard.dev/policy "
        "annotation. Null means the policy's metadata.name.",
    )
    partitions: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(
        default_factory=list,
        description="Slurm partitions covered; empty means all. Lets one policy per partition differ.",
    )
    namespaces: list[Annotated[str, Field(min_length=1, max_length=63)]] = Field(
        default_factory=list,
        description="Kubernetes namespaces covered; empty means all. Under the operator a policy outside the "
        "operator's namespace covers its own namespace only.",
    )
    accounts: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(
        default_factory=list,
        description="Slurm accounts covered; empty means all.",
    )
    users: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(
        default_factory=list,
        description="Users (Slurm user names) covered; empty means all.",
    )
    qos: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(
        default_factory=list,
        description="Slurm QOS names covered; empty means all.",
    )
    labels: dict[str, Annotated[str, Field(max_length=63)]] = Field(
        default_factory=dict,
        max_length=32,
        description="Kubernetes labels a workload must all carry with these values (like matchLabels); "
        "empty means any.",
    )
    priority: int = Field(
        default=0,
        ge=-1000,
        le=1000,
        description="Breaks a routing tie between policies whose selectors are equally specific: the "
        "higher priority wins; an equal priority too is ambiguous and covers nothing (recorded).",
    )

    @field_validator("labels")
    @classmethod
    def _label_keys(cls, labels: dict[str, str]) -> dict[str, str]:
        # Checked here, not in the schema: a structural CRD schema cannot constrain map keys.
        for key in labels:
            if not 1 <= len(key) <= 317:
                raise ValueError(f"label key {key[:40]!r} must be 1..317 characters (prefix/name)")
        return labels

    def dimensions(self) -> int:
        """Routing specificity: the selector dimensions set (each label key counts as one)."""
        lists = (self.partitions, self.namespaces, self.accounts, self.users, self.qos)
        return sum(1 for values in lists if values) + len(self.labels)


class Backoff(_Section):
    """Delay before a requeued attempt may start again, growing with each retry after the first.

    Carried out by requeueing held and releasing at the advice's ``release_at``.
    """

    initial_seconds: float = Field(
        default=30.0,
        ge=0,
        le=86400,
        description="Delay before the second retry, in seconds (the first retry is immediate: most "
        "failures are one-off). 30 s lets drained nodes and NCCL ports settle without costing much goodput.",
    )
    max_seconds: float = Field(
        default=600.0, ge=0, le=86400, description="Upper bound of the delay, in seconds (10 min)."
    )
    factor: float = Field(
        default=2.0, ge=1.0, le=10.0,
        description="Multiplier per further retry: retry n+1 (n >= 1) waits initialSeconds x factor^(n-1), capped.",
    )

    @model_validator(mode="after")
    def _ordered(self) -> Backoff:
        if self.max_seconds < self.initial_seconds:
            raise ValueError("maxSeconds must be >= initialSeconds")
        return self


class Retries(_Section):
    """Retry budget per workload."""

    max_retries: int = Field(
        default=3,
        ge=0,
        le=100,
        description="Requeues allowed per workload, counted like Slurm's restart "
        "count. 3 mirrors NVRx's general retry budget; beyond that a human should look.",
    )
    max_attempts_without_checkpoint: int = Field(
        default=2,
        ge=1,
        le=100,
        description="Stop after this many consecutive attempts that failed without "
        "saving a new checkpoint: retrying cannot make progress (NVRx no-progress stop).",
    )
    backoff: Backoff = Field(default_factory=Backoff, description="Delay between retries.")


class Detection(_Section):
    """What counts as a hang, a checkpoint and a slowdown for covered workloads."""

    hang_timeout: Duration = Field(
        default=_duration("30m"),
        description="Progress silence after which the attempt is a hang (duration). 30 min "
        "covers a slow checkpoint save on large models without waiting for NCCL's own 10 min x retries.",
    )
    progress_regex: Regex | None = Field(
        default=None,
        description="Portable regex of a progress line (e.g. 'iteration [0-9]+'). Null: any "
        "output line counts as progress.",
    )
    checkpoint_regex: Regex = Field(
        default=DEFAULT_CHECKPOINT_REGEX,
        description="Portable regex of a line that proves a checkpoint was written; drives "
        "retries.maxAttemptsWithoutCheckpoint.",
    )
    throughput_drop_threshold: float = Field(
        default=0.5,
        gt=0.0,
        lt=1.0,
        description="Fraction of the recent baseline below which throughput counts "
        "as dropped (0.5 = half speed). Conservative, so jitter is not a straggler.",
    )
    throughput_window: Duration = Field(
        default=_duration("10m"), description="How long a drop must last, and the baseline length (duration)."
    )
    throughput_drop_action: Literal["off", "requeue"] = Field(
        default="off",
        description="'off': stragglers are detected and recorded, never acted on (default, as "
        "restarting a slow job is costly and often wrong). 'requeue': requeue without the slow node when "
        "one is named; otherwise requeue and say that no node is excluded.",
    )
    gpu_metric_action: Literal["record", "requeue"] = Field(
        default="record",
        description="A hardware fault in the GPU metrics (Xid, uncorrectable ECC, row-remap failure, NVLink "
        "recovery) on a node of a running job, with --prometheus-url set: 'record' (default) records the "
        "anomaly, verdict and an advice to do nothing, as the job may still finish; 'requeue': requeue the "
        "job without that node at once.",
    )
    settle: Duration = Field(
        default=_duration("1s"),
        description="Wait after the first failure line before concluding, so the whole "
        "cascade (other ranks' timeouts) is read and the first cause is found (duration). 1 s: ranks "
        "that die together print within a second; stronger (hardware) evidence arriving later still "
        "produces a new advice generation.",
    )
    extra_patterns: list[Annotated[patterns.PatternSpec, AfterValidator(user_regex.check_pattern)]] = Field(
        default_factory=list,
        description="Operator patterns added to the catalog for covered workloads (catalog schema: snake_case keys).",
    )

    @field_validator("progress_regex", "checkpoint_regex")
    @classmethod
    def _portable(cls, value: str | None) -> str | None:
        if value is not None:
            patterns.check_portable(value)
        return value


class Exclusion(_Section):
    """Which nodes a retry avoids, and when a node is a lemon."""

    exclude_on_hardware: bool = Field(
        default=True, description="Requeue without the suspect nodes when the verdict is hardware."
    )
    max_excluded_nodes_per_job: int = Field(
        default=2,
        ge=0,
        le=64,
        description="Most nodes Trainguard itself may exclude for one job, over all its attempts; the "
        "user's own --exclude stays and does not count. 2, like NVRx "
        "LogSage's isolation count: a wrong verdict cannot shrink the usable pool much.",
    )
    lemon_node_threshold: int = Field(
        default=3,
        ge=1,
        le=1000,
        description="A node implicated in this many incidents (workload, attempt) "
        "within lemonNodeWindow is a lemon (Meta's lemon-node practice).",
    )
    lemon_node_window: Duration = Field(default=_duration("7d"), description="Window of lemon counting (duration).")
    drain_lemon_nodes: bool = Field(
        default=False,
        description="Drain (Slurm) or cordon (Kubernetes) lemon nodes. Off by default: taking "
        "nodes away from everyone is the operators' call.",
    )
    undrain_after: Duration | None = Field(
        default=_duration("1d"),
        description="Resume a node we drained once this long has passed since the drain (duration), "
        "if its drain reason is still ours (a node a person drained or re-labelled is never resumed). "
        "Null: never; our drained nodes stay drained until a person resumes them. A day gives an "
        "operator a working day to look; a node that fails again is a lemon again and is drained again.",
    )
    validation: validation_mod.Validation | None = Field(
        default=None,
        description="A check the node must pass before we return it (the time rule's or a person's return); "
        "null: the node returns without a check. Slurm schedulers and Kubernetes (docs/policy.md).",
    )


class Actions(_Section):
    """Operations this policy may perform in Action mode."""

    allowed: list[ActionName] = Field(
        default_factory=lambda: [ActionName.REQUEUE, ActionName.STOP],
        description="Allowed operations. Default requeue and stop: node drains need an explicit opt-in.",
    )


class BlastRadius(_Section):
    """Limits that keep a wrong verdict from hurting the whole cluster (peer practice: <=3/h, 50%/5 min)."""

    max_actions_per_hour: int = Field(
        default=20,
        ge=0,
        le=10000,
        description="Operations across all workloads in any rolling hour; 0 "
        "blocks every action. 20 is generous for one cluster, low enough to stop a restart storm.",
    )
    max_drained_share: float = Field(
        default=0.1,
        ge=0.0,
        le=1.0,
        description="Largest fraction of a partition's nodes we may hold drained at once (0.1 = 10%).",
    )


class Watchdog(_Section):
    """Deadline of a decision; after it the workload is released to the scheduler's default behaviour."""

    deadline: Duration = Field(
        default=_duration("5m"),
        description="Time from advice to verified outcome (duration). 5 min covers a requeue, "
        "hold, exclusion and release round trip on a busy slurmctld.",
    )


class AttributionService(_Section):
    """Optional external attribution service (HTTP JSON, see docs/policy.md)."""

    url: str | None = Field(
        default=None,
        max_length=2048,
        pattern=r"^https?://[^\s]+$",
        description="POST endpoint of the service. Null: built-in rules only.",
    )
    timeout: Duration = Field(
        default=_duration("5s"), description="Time box of one call (duration); on expiry the built-in verdict is used."
    )


class RuleAction(enum.StrEnum):
    """What a matching rule asks for; the retry budget and ``actions.allowed`` still apply."""

    REQUEUE = "Requeue"
    """Requeue within the retry budget, without excluding new nodes."""
    REQUEUE_EXCLUDING = "RequeueExcluding"
    """Requeue within the retry budget without the verdict's suspect and lemon nodes (capped)."""
    STOP = "Stop"
    """Stop the job now (cancel); no retry."""
    HOLD = "Hold"
    """Hold the job for a person to look at."""
    IGNORE = "Ignore"
    """Record the failure and do nothing."""


_SINGULAR_KEYS: Final = {"symptom": "symptoms", "attribution": "attributions", "category": "categories",
                         "exitCode": "exitCodes", "exit_code": "exitCodes"}


class RuleMatch(_Section):
    """When a rule applies: every condition given must hold; within one list, any value matches.

    An empty match matches every failure (a catch-all, allowed only as the last rule).
    """

    symptoms: list[vocab.Symptom] = Field(
        default_factory=list, description="Symptoms (crash, hang, straggler); empty means any."
    )
    attributions: list[vocab.Attribution] = Field(
        default_factory=list, description="Attributions (hardware, system, application, unknown); empty means any."
    )
    categories: list[vocab.Category] = Field(
        default_factory=list, description="Failure categories of the verdict (e.g. gpu_xid_hardware); empty means any."
    )
    exit_codes: list[Annotated[int, Field(ge=0, le=255)]] = Field(
        default_factory=list,
        description="Exit codes of the job, known once it has ended (like Slurm's RequeueExit); empty means any. "
        "A rule with exitCodes never matches a job that is still running (e.g. a hang).",
    )

    @model_validator(mode="before")
    @classmethod
    def _plural_names(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for singular, plural in _SINGULAR_KEYS.items():
                if singular in data:
                    raise ValueError(f"unknown field {singular!r}: the field is {plural!r}, a list")
        return data

    def empty(self) -> bool:
        return not (self.symptoms or self.attributions or self.categories or self.exit_codes)


class Rule(_Section):
    """One failure-handling rule: the first rule whose ``match`` holds decides the action."""

    match: RuleMatch = Field(description="When the rule applies.")
    action: RuleAction = Field(description="What the failure gets.")


MAX_RULES: Final = 64


class RecoveryPolicySpec(_Section):
    """The spec of a RecoveryPolicy (also the CRD's spec schema)."""

    mode: vocab.Mode = Field(
        default=vocab.Mode.MONITOR,
        description="Monitor records advice and does nothing; Action acts. "
        "Monitor by default so a new policy is compared with human decisions before it gets authority.",
    )
    selector: Selector = Field(default_factory=Selector, description="Workloads covered.")
    retries: Retries = Field(default_factory=Retries, description="Retry budget.")
    detection: Detection = Field(default_factory=Detection, description="Detection settings.")
    exclusion: Exclusion = Field(default_factory=Exclusion, description="Node exclusion and lemon nodes.")
    actions: Actions = Field(default_factory=Actions, description="Allowed operations.")
    blast_radius: BlastRadius = Field(default_factory=BlastRadius, description="Cluster-wide limits.")
    watchdog: Watchdog = Field(default_factory=Watchdog, description="Decision deadline.")
    attribution: AttributionService = Field(
        default_factory=AttributionService, description="External attribution service."
    )
    do_not_requeue_exit_codes: list[Annotated[int, Field(ge=0, le=255)]] = Field(
        default_factory=lambda: [93],
        description="Exit codes by which a job says 'do not requeue me'; 93 is NVRx's no-restart code.",
    )
    application_error_action: Literal["requeue", "stop"] = Field(
        default="requeue",
        description="What an application-attributed failure gets: 'requeue' within the "
        "retry budget (a transient bug or bad node may pass), or 'stop' at once.",
    )
    rules: list[Rule] = Field(
        default_factory=list,
        max_length=MAX_RULES,
        description="Per-failure rules, first match wins (like JobSet's failurePolicy rules and Slurm's "
        "RequeueExit): match on symptoms, attributions, categories, exitCodes; action Requeue, "
        "RequeueExcluding, Stop, Hold or Ignore. No match: the built-in behaviour. A job's own "
        "doNotRequeueExitCodes still come first.",
    )

    @field_validator("rules")
    @classmethod
    def _reachable(cls, rules: list[Rule]) -> list[Rule]:
        for index, rule in enumerate(rules[:-1]):
            if rule.match.empty():
                raise ValueError(
                    f"rule {index} matches every failure, so the {len(rules) - index - 1} rule(s) after it "
                    "can never apply; make it the last rule or give it a match"
                )
        return rules


class Metadata(BaseModel):
    """The part of Kubernetes object metadata a policy needs."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str = Field(
        min_length=1,
        max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        description="Policy name (DNS-1123 subdomain).",
    )
    namespace: str | None = None


class RecoveryPolicy(BaseModel):
    """A named policy: ``metadata.name`` + ``spec``."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    api_version: str = Field(default=API_VERSION, alias="apiVersion")
    kind: Literal["RecoveryPolicy"] = KIND
    metadata: Metadata
    spec: RecoveryPolicySpec = Field(default_factory=RecoveryPolicySpec)

    @field_validator("api_version")
    @classmethod
    def _group(cls, value: str) -> str:
        if not value.startswith("trainguard.dev/"):
            raise ValueError(f"apiVersion must be in the trainguard.dev group, got {value!r}")
        return value

    @property
    def name(self) -> str:
        """The name jobs select: ``selector.policyName`` if set, else ``metadata.name``."""
        return self.spec.selector.policy_name or self.metadata.name


def crd_openapi_schema() -> dict[str, Any]:
    """A Kubernetes structural OpenAPI v3 schema of ``RecoveryPolicySpec`` (``model.openapi``).

    Derived from ``model_json_schema`` so defaults and bounds have one source; list defaults come
    from a default spec, and nested objects get ``default: {}`` so the apiserver fills in their
    fields' defaults.
    """
    defaults = RecoveryPolicySpec().model_dump(by_alias=True, mode="json")
    schema = openapi.structural_schema(RecoveryPolicySpec, defaults=defaults)
    # A rule's match must be written out: defaulted to {} by the apiserver, an omitted match would
    # silently become a catch-all rule.
    schema["properties"]["rules"]["items"]["properties"]["match"].pop("default", None)
    return schema

