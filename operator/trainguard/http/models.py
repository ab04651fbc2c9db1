"""The shapes of ``/api/v1``: one pydantic source for the responses and the OpenAPI document.

Every handler of the API (the route modules that ``http.api`` mounts) builds its answer from these
models, and ``http/openapi.py`` puts their ``model_json_schema`` into the document's components,
so the document cannot drift from what is served (a test validates real responses against it).

``/api/v1/workloads`` and ``/api/v1/audit`` are contracts checked from outside: an object with
``items`` and ``next`` (an opaque cursor, or null on the last page). Audit items carry exactly the
fields ``trainguard audit --format json`` prints (``store.audit.AuditRecord.to_json``).
"""

from __future__ import annotations

import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

ModeName = Literal["monitor", "action", "unknown"]
"""A workload's or policy's effective mode in the API (lower case, like ``--mode``)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Error(_Model):
    """Every 4xx/5xx answer of the API: one clear sentence."""

    error: str
    status: int


class WorkloadItem(_Model):
    """One row of the workloads table."""

    workload: str
    state: str
    attempt: int = Field(description="the latest attempt recorded (0 before any)")
    policy: str
    mode: ModeName
    scheduler: str
    job_id: str
    first_seen: str
    last_seen: str
    anomalies: int = Field(description="anomalies recorded for the workload, all attempts")
    opt_in_errors: list[str]


class WorkloadPage(_Model):
    items: list[WorkloadItem]
    next: str | None = Field(description="opaque cursor of the next page; null on the last page")


class AuditItem(_Model):
    """Exactly the fields of ``trainguard audit --format json``."""

    id: int
    time: str = Field(description="UTC ISO 8601 with microseconds")
    workload: str
    attempt: int | None
    kind: Literal["anomaly", "verdict", "advice", "action", "outcome", "watchdog"]
    payload: dict[str, Any]
    decided_by: str
    policy_version: str
    catalog_version: str
    settings_fingerprint: str


class AuditPage(_Model):
    items: list[AuditItem]
    next: str | None = Field(description="opaque cursor of the next page; null on the last page")


class Evidence(_Model):
    """One log line behind an anomaly, with the catalog pattern it matched."""

    line: int | None = None
    text: str = ""
    pattern: str = ""


class TimelineStep(_Model):
    """One audit record of an attempt, in the order the loop wrote them."""

    id: int
    time: str
    kind: str
    decided_by: str
    summary: str
    since_previous_s: float | None = Field(description="seconds since the previous step of the attempt")
    evidence: list[Evidence]
    suspect_nodes: list[str]
    suspect_ranks: list[int]
    payload: dict[str, Any]


class AttemptView(_Model):
    attempt: int
    state: str
    started_at: str | None
    ended_at: str | None
    nodes: list[str]
    checkpoint_saved: bool
    timeline: list[TimelineStep]
    time_lost_s: float | None = Field(description="from the first anomaly to the attempt's end (or now)")


class WorkloadDetail(_Model):
    workload: WorkloadItem
    comment: str
    attempts: list[AttemptView]
    timeline_truncated: bool = Field(description="true when older records were left out (see /api/v1/audit)")


class PolicyItem(_Model):
    name: str
    declared_mode: Literal["Monitor", "Action"]
    mode: ModeName = Field(description="effective: Monitor when the cluster-wide Action switch is off")
    mode_switched_by: str | None = Field(description="who switched the mode through the API, if anyone")
    covered_workloads: int
    status: str
    spec: dict[str, Any]


class PolicyList(_Model):
    items: list[PolicyItem]
    action_switch: bool = Field(description="the cluster-wide Action switch (--mode action)")


class NodeIncident(_Model):
    workload: str
    attempt: int
    category: str
    at: str


class NodeAction(_Model):
    """A change we made to a node (drain, resume) as our audit store records it."""

    workload: str
    attempt: int
    generation: int
    step: str
    operation: str
    status: str
    at: str
    error: str
    undoable: bool = Field(description="our drain, done, not yet resumed: POST /api/v1/nodes/{node}/undo-drain")


class NodeItem(_Model):
    node: str
    incidents: list[NodeIncident]
    actions: list[NodeAction]
    state: str = Field("in-service", description="the node lifecycle's state (``trainguard nodes``): in-service, "
                       "suspect, out-of-service, validating, held-for-repair, other")
    reason: str = ""
    since: str | None = Field(None, description="time of the latest lifecycle transition (none: never recorded)")
    by: str = Field("", description="who made the latest transition: trainguard or a person")


class NodeTransition(_Model):
    """One row of a node's lifecycle (``model.lifecycle.Transition``)."""

    state: str
    event: str
    reason: str
    by: str
    at: str
    workload: str
    attempt: int | None
    evidence: dict[str, Any]


class NodeDetail(_Model):
    """``GET /api/v1/nodes/{node}``: the node's state, its whole lifecycle and the incidents charged to it."""

    node: str
    state: str
    reason: str
    since: str | None
    by: str
    history: list[NodeTransition]
    incidents: list[NodeIncident]


class NodeDecision(_Model):
    """``POST /api/v1/nodes/{node}/hold`` or ``/return``: a person's decision, recorded with who and why."""

    reason: str = Field(min_length=1, max_length=1000, description="why (recorded in the lifecycle and the audit log)")


class NodeList(_Model):
    items: list[NodeItem]
    since: str


class EngineHealth(_Model):
    alive: bool
    ready: bool
    reasons: list[str]
    loop_lag_s: float
    heartbeat_age_s: float | None
    scheduler: dict[str, Any]
    store: dict[str, Any]
    standby: str | None
    leader: bool | None = Field(description="true when this process runs the engine; null when unknown")
    engine_running: bool
    tracked_workloads: int


class ActionsState(_Model):
    """``GET /api/v1/actions``: whether recoveries may change the scheduler now (both keys)."""

    acting: bool = Field(description="true when Action-mode policies act now: the cluster switch is on and "
                                     "actions are not paused")
    switch: bool = Field(description="the cluster-wide switch this process runs with (--mode action)")
    paused: bool = Field(description="the runtime pause (trainguard actions pause, the API, the console, the "
                                     "trainguard-control ConfigMap)")
    reason: str = Field(description="why actions are paused (empty when not)")
    by: str = Field(description="who set or cleared the pause last")
    since: datetime.datetime | None = Field(description="when the pause was last set or cleared")
    breaker: str = Field("", description="why the blast-radius breaker stops every action (empty when closed; "
                                         "a person resets it: POST /api/v1/actions/breaker/reset)")


class PauseRequest(_Model):
    """``POST /api/v1/actions/pause``."""

    reason: str = Field(min_length=1, max_length=1000, description="why (recorded and shown in the console)")


class ModeChange(_Model):
    mode: Literal["Monitor", "Action", "monitor", "action"]


class Acknowledge(_Model):
    note: str = Field("", max_length=1000)


class BacktestRequest(_Model):
    """``POST /api/v1/backtest``: replay the journal's decisions under ``policy`` (RecoveryPolicy YAML)."""

    policy: str = Field(max_length=1_000_000, description="RecoveryPolicy YAML documents (the changed policy set)")
    since: datetime.datetime | None = None
    until: datetime.datetime | None = None
    workload: str | None = Field(None, max_length=255)
    all: bool = Field(False, description="every decision, not only those that differ")


class BacktestRow(_Model):
    """One replayed decision (the fields of ``trainguard backtest --format json``)."""

    workload: str
    attempt: int
    generation: int
    time: float
    recorded: str
    replayed: str
    differs: bool
    recorded_policy: str
    replayed_policy: str
    category: str
    replayed_category: str
    recorded_exclusions: list[str]
    replayed_exclusions: list[str]
    recorded_drains: list[str]
    replayed_drains: list[str]
    stop_vs_retry: str | None
    blocked_by: str | None
    after_change: bool
    reasons: list[str]


class BacktestSummary(_Model):
    summary: bool = True
    decisions: int
    changed_decisions: int
    workloads: int
    workloads_affected: int
    requeues_recorded: int
    requeues_replayed: int
    extra_requeues: int
    removed_requeues: int
    nodes_excluded_recorded: list[str]
    nodes_excluded_replayed: list[str]
    nodes_drained_recorded: list[str]
    nodes_drained_replayed: list[str]
    blocked_by_limits: int
    not_covered: int
    notes: list[str]


class BacktestResult(_Model):
    rows: list[BacktestRow]
    truncated: bool = Field(description="more rows differed than the answer holds (narrow the window)")
    summary: BacktestSummary


class MutationResult(_Model):
    ok: bool
    message: str
    audit: AuditItem | None = None


class WhoAmI(_Model):
    user: str
    role: Literal["read", "write"]
    auth: Literal["none", "token", "kubernetes"]


class ScorecardRow(_Model):
    """One Monitor-mode advice, scored (the fields of ``trainguard scorecard --format json``; docs/scorecard.md)."""

    workload: str
    attempt: int
    generation: int
    advice: str
    policy: str
    category: str
    nodes: list[str]
    score: Literal["agree", "disagree", "would-have-helped", "unknown"]
    detail: str
    requeued_by: str
    drained_by_other: dict[str, str]
    harmful: bool
    gpu_hours_saved: float | None
    evidence: list[str]


class ScorecardSummary(_Model):
    """One policy's summary and its "ready for Action" signal."""

    policy: str
    summary: bool
    advice: int
    scored: int
    agree: int
    disagree: int
    would_have_helped: int
    unknown: int
    agreement_rate: float | None
    harmful: int
    gpu_hours_saved: float
    ready_for_action: bool
    not_ready_because: list[str]
    readiness_rule: str


class Scorecard(_Model):
    items: list[ScorecardRow]
    summaries: list[ScorecardSummary]


class GoodputRow(_Model):
    """One group of ``trainguard goodput --format json`` (docs/goodput.md); ``group`` is the value of
    the grouping (the workload id, the category, the node or the policy)."""

    workload: str = Field(description="the workload id when grouped by workload, else '*'")
    group: str
    workloads: list[str]
    attempts: int
    failures: int
    productive_seconds: float
    lost_seconds: float
    work_lost_seconds: float
    detection_seconds: float
    decision_seconds: float
    action_seconds: float
    requeue_wait_seconds: float
    goodput: float | None
    mttr_seconds: float | None
    mtbf_seconds: float | None
    estimated_failures: int
    baseline_lost_seconds: float | None = Field(description="estimated loss without Trainguard; null: no honest "
                                                "estimate (see estimate)")
    saved_seconds: float | None
    estimate: list[str] = Field(description="bases of the estimate: job_exit, job_timeout, none")


class GoodputFailure(_Model):
    """One failed attempt's lost time by cause (the console's plot over time)."""

    workload: str
    attempt: int
    policy: str
    category: str
    symptom: str
    nodes: list[str]
    onset: str = Field(description="UTC ISO 8601: when the failure began")
    lost_seconds: float
    work_lost_seconds: float
    detection_seconds: float
    decision_seconds: float
    action_seconds: float
    requeue_wait_seconds: float
    recovered: bool
    requeued_by: Literal["trainguard", "other", "none"]
    checkpoint_basis: Literal["checkpoint_line", "attempt_start"]
    baseline_lost_seconds: float | None
    estimate: Literal["job_exit", "job_timeout", "none"]


class GoodputReport(_Model):
    by: Literal["workload", "category", "node", "policy"]
    items: list[GoodputRow]
    failures: list[GoodputFailure] = Field(description="the most recent failures (at most 2,000), oldest first")
    job_timeout_seconds: float
    manual_delay_seconds: float


MODELS: tuple[type[BaseModel], ...] = (
    Error, WorkloadItem, WorkloadPage, AuditItem, AuditPage, Evidence, TimelineStep, AttemptView, WorkloadDetail,
    PolicyItem, PolicyList, NodeIncident, NodeAction, NodeItem, NodeList, NodeTransition, NodeDetail, NodeDecision,
    EngineHealth, ModeChange, Acknowledge,
    MutationResult, WhoAmI, ScorecardRow, ScorecardSummary, Scorecard, GoodputRow, GoodputFailure, GoodputReport,
    BacktestRequest, BacktestRow, BacktestSummary, BacktestResult, ActionsState, PauseRequest,
)
"""Every model the document's components hold."""
