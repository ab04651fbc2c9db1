"""WorkloadRecovery objects as a projection of the engine's state: computed, compared, patched on change.

Place in the loop: the reporting step. The engine keeps a ``WorkloadRuntime`` per watched workload
(job snapshot, effective policy, last anomaly/verdict/advice, disposition, recent records); this
module turns one into the ``WorkloadRecovery`` a user sees with ``kubectl get recoveries``:

- ``view_of`` copies what the projection needs out of the runtime (a frozen value, so the pure
  part is tested without an engine);
- ``project`` computes the status from a view and the status currently stored (to keep condition
  transition times and respect the phase transition guard of ``k8s/recovery.py``);
- ``differs`` compares a stored object with the view; the write itself (read, compare, patch with
  the resourceVersion read) is ``status_write.sync_status``.

The audit store is the durable log; status is the view, rebuilt from the engine at any time.
"""

from __future__ import annotations

import datetime
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic import ValidationError

from trainguard import engine as engine_mod
from trainguard.k8s import condition, recovery
from trainguard.k8s.kubejobs import common as kube_common
from trainguard.model import actions, times, vocab, workloads

logger = logging.getLogger(__name__)

MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "trainguard"
WORKLOAD_ANNOTATION: Final = "trainguard.dev/workload"
"""The engine's workload id (``slurm/<cluster>/<job id>``) on each WorkloadRecovery we create."""

# Condition reasons: a closed set of CamelCase constants, so clients and tests can match on them.
POLICY_FOUND: Final = "PolicyFound"
"""PolicyResolved=True: a RecoveryPolicy covers the workload."""
POLICY_NOT_FOUND: Final = "PolicyNotFound"
"""PolicyResolved=False: no Accepted policy covers it; advice is not produced."""
ANOMALY_OPEN: Final = "AnomalyOpen"
"""Degraded=True: an anomaly is open on the current attempt."""
NO_ANOMALY: Final = "NoAnomaly"
"""Degraded=False: nothing open on the current attempt."""
RECOVERY_IN_PROGRESS: Final = "RecoveryInProgress"
"""Converged=False: the current advice generation is being carried out."""
ADVICE_RECORDED: Final = "AdviceRecorded"
"""Converged=True: Monitor mode; the advice was recorded, nothing done."""
DESIRED_STATE_REACHED: Final = "DesiredStateReached"
"""Converged=True: the scheduler reached the advised state (verified)."""
ABANDONED: Final = "Abandoned"
"""Converged=False: the watchdog gave up; the workload follows the scheduler's default behaviour."""
WORKLOAD_HEALTHY: Final = "WorkloadHealthy"
"""Ready=True: the workload runs (or ended well, or was stopped) and nothing is open or under way."""
WORKLOAD_HELD: Final = "WorkloadHeld"
"""Ready=False: the job is held, waiting for a release (by a person, or by the recovery under way)."""
WORKLOAD_FAILED: Final = "WorkloadFailed"
"""Ready=False: the job ended in failure and no recovery is under way."""


@dataclass(frozen=True)
class Record:
    """One of the engine's recent records (``WorkloadRuntime.recent``)."""

    kind: str
    at: float
    payload: Mapping[str, Any]


@dataclass(frozen=True)
class WorkloadView:
    """What the projection reads of one workload, copied out of the engine at one instant."""

    workload: str
    job: workloads.JobSnapshot
    policy_name: str
    mode: vocab.Mode | None
    """Effective mode; None when no policy covers the workload."""
    opt_in_errors: tuple[str, ...] = ()
    detector_attempt: int = -1
    recovering: bool = False
    """An advice generation is being carried out right now."""
    disposition: vocab.Disposition | None = None
    records: tuple[Record, ...] = field(default_factory=tuple)
    steps: tuple[actions.ActionRecord, ...] = ()
    """Executor steps of the latest advice generation (from the audit store)."""


def view_of(rt: engine_mod.WorkloadRuntime, steps: Sequence[actions.ActionRecord] = ()) -> WorkloadView:
    """A frozen copy of what ``project`` needs from an engine runtime (and the store's steps)."""
    return WorkloadView(
        workload=rt.workload,
        job=rt.job,
        policy_name=rt.policy_name,
        mode=rt.spec.mode if rt.spec is not None else None,
        opt_in_errors=tuple(rt.opt_in_errors),
        detector_attempt=rt.detector_attempt,
        # The task outlives the disposition by the outcome notification: Pending is what says "under way".
        recovering=rt.task is not None and not rt.task.done() and rt.disposition == vocab.Disposition.PENDING,
        disposition=rt.disposition,
        records=tuple(Record(str(r["kind"]), _seconds(r.get("at")), _mapping(r.get("payload"))) for r in rt.recent),
        steps=tuple(steps),
    )


# ---------------------------------------------------------------------------- naming


def split_workload(workload: str) -> tuple[str, str]:
    """(cluster, job id) of a ``slurm/<cluster>/<job id>`` workload id; ValueError otherwise."""
    parts = workload.split("/")
    if len(parts) != 3 or parts[0] != "slurm" or not parts[2]:
        raise ValueError(f"not a Slurm workload id: {workload!r}")
    return parts[1], parts[2]


def kube_workload(workload: str) -> tuple[str, recovery.WorkloadKind, str] | None:
    """(namespace, kind, name) of a Kubernetes workload id (``k8s/NS/KIND/NAME``); None for others."""
    try:
        namespace, kind, name = kube_common.split_id(workload)
        return namespace, recovery.WorkloadKind(kind), name
    except ValueError:
        return None


def namespace_of(workload: str, default: str) -> str:
    """Where the workload's WorkloadRecovery lives: a Kubernetes workload's own namespace (an owner
    reference cannot cross namespaces), else ``default`` (the operator's)."""
    kube = kube_workload(workload)
    return kube[0] if kube is not None else default


def object_name(workload: str) -> str:
    """The WorkloadRecovery name of a workload: ``slurm-<cluster>-<job id>`` as a DNS-1123 name, or
    ``<kind>-<name>`` (``jobset-train``) for a Kubernetes workload."""
    kube = kube_workload(workload)
    if kube is not None:
        return f"{kube[1].value.lower()}-{kube[2]}"
    cluster, job_id = split_workload(workload)
    cluster = re.sub(r"[^a-z0-9-]+", "-", cluster.lower()).strip("-")[:60] or "default"
    return f"slurm-{cluster}-{job_id.replace('_', '-')}"


def desired_object(view: WorkloadView, namespace: str, owner: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The WorkloadRecovery to create for a newly tracked workload (status comes separately).

    A Kubernetes workload's object is created in the workload's namespace with an owner reference to
    it (``owner``: apiVersion, kind, name, uid), so Kubernetes garbage-collects it with the workload."""
    kube = kube_workload(view.workload)
    if kube is not None:
        namespace = kube[0]
        ref = recovery.WorkloadRef(kind=kube[1], id=kube[2])
    else:
        cluster, job_id = split_workload(view.workload)
        ref = recovery.WorkloadRef(kind=recovery.WorkloadKind.SLURM_JOB, cluster=cluster, id=job_id)
    spec = recovery.WorkloadRecoverySpec(workload=ref)
    metadata: dict[str, Any] = {
        "name": object_name(view.workload),
        "namespace": namespace,
        "labels": {MANAGED_BY_LABEL: MANAGED_BY},
        "annotations": {WORKLOAD_ANNOTATION: view.workload},
    }
    if kube is not None and owner is not None:
        metadata["ownerReferences"] = [{**owner, "controller": False, "blockOwnerDeletion": False}]
    return {
        "apiVersion": recovery.API_VERSION,
        "kind": recovery.KIND,
        "metadata": metadata,
        "spec": spec.model_dump(mode="json", by_alias=True, exclude_none=True),
    }


# ---------------------------------------------------------------------------- projection


def _time(seconds: float) -> datetime.datetime:
    return times.to_datetime(seconds)


def _anomalies(view: WorkloadView) -> list[recovery.AnomalySummary]:
    """Anomalies in ``records``, newest first, each with the verdict and attempt recorded after it."""
    found: list[recovery.AnomalySummary] = []
    records = view.records
    for index, record in enumerate(records):
        if record.kind != vocab.AuditKind.ANOMALY:
            continue
        later = records[index + 1 :]
        verdict = next((r.payload for r in later if r.kind == vocab.AuditKind.VERDICT), {})
        advised = next((r.payload for r in later if r.kind == vocab.AuditKind.ADVICE), None)
        attempt = advised.get("attempt") if advised is not None else None
        if not isinstance(attempt, int):
            attempt = max(view.detector_attempt, view.job.attempt, 0)
        evidence = record.payload.get("evidence") or []
        pattern = evidence[0].get("pattern") if evidence and isinstance(evidence[0], Mapping) else None
        try:
            found.append(
                recovery.AnomalySummary(
                    time=_time(record.at),
                    attempt=attempt + 1,
                    symptom=vocab.Symptom(record.payload.get("symptom", vocab.Symptom.CRASH)),
                    category=vocab.Category(record.payload.get("category", vocab.Category.NONE)),
                    verdict=vocab.Attribution(verdict.get("attribution", vocab.Attribution.UNKNOWN)),
                    nodes=list(verdict.get("suspect_nodes") or record.payload.get("suspect_nodes") or [])[
                        : recovery.MAX_NODES
                    ],
                    pattern=str(pattern)[:253] if pattern else None,
                )
            )
        except (ValueError, ValidationError) as exc:
            logger.warning("%s: anomaly record not shown in status: %s", view.workload, exc)
    found.reverse()
    return found[: recovery.MAX_RECENT]


def _advice(view: WorkloadView) -> tuple[recovery.AdviceSummary | None, int | None]:
    """The latest advice and the attempt it is for."""
    latest = next((r for r in reversed(view.records) if r.kind == vocab.AuditKind.ADVICE), None)
    if latest is None:
        return None, None
    payload = latest.payload
    deadline = payload.get("deadline")
    summary = recovery.AdviceSummary(
        action=vocab.AdviceAction(payload.get("action", vocab.AdviceAction.NONE)),
        generation=int(payload.get("generation", 1)),
        mode=vocab.Mode(payload.get("mode", vocab.Mode.MONITOR)),
        disposition=view.disposition or vocab.Disposition.PENDING,
        exclude_nodes=list(payload.get("exclude_nodes") or [])[: recovery.MAX_NODES],
        reasons=[str(reason)[: recovery.MAX_TEXT] for reason in payload.get("reasons") or []][: recovery.MAX_REASONS],
        deadline=_time(float(deadline)) if isinstance(deadline, int | float) else None,
    )
    attempt = payload.get("attempt")
    return summary, attempt if isinstance(attempt, int) else None


def _restarts(view: WorkloadView) -> int:
    """Requeues carried out on our advice, as far as the recent records show."""
    requeued: set[int] = set()
    advised: dict[int, Mapping[str, Any]] = {}
    for record in view.records:
        generation = record.payload.get("generation")
        if not isinstance(generation, int):
            continue
        if record.kind == vocab.AuditKind.ADVICE:
            advised[generation] = record.payload
        elif record.kind == vocab.AuditKind.OUTCOME and (
            record.payload.get("disposition") == vocab.Disposition.CONVERGED
        ):
            item = advised.get(generation)
            if item is not None and item.get("action") == vocab.AdviceAction.REQUEUE and (
                item.get("mode") == vocab.Mode.ACTION
            ):
                requeued.add(generation)
    return len(requeued)


def _steps(view: WorkloadView, previous: recovery.WorkloadRecoveryStatus | None) -> list[recovery.ActionSummary]:
    """Executor steps, newest first: the view's (latest generation) merged over those already shown."""
    shown: dict[tuple[int, int, str], recovery.ActionSummary] = {
        (a.attempt, a.generation, a.step): a for a in (previous.recent_actions if previous is not None else [])
    }
    for step in view.steps:
        summary = recovery.ActionSummary(
            time=_time(step.updated_at or step.created_at), attempt=step.attempt + 1, generation=step.generation,
            step=step.step[:253], operation=step.operation, status=step.status, message=step.error[: recovery.MAX_TEXT],
        )
        shown[(summary.attempt, summary.generation, summary.step)] = summary
    ordered = sorted(shown.values(), key=lambda a: (a.time, a.generation, a.step), reverse=True)
    return ordered[: recovery.MAX_RECENT]


def phase_of(view: WorkloadView, anomaly_open: bool) -> recovery.Phase:
    """The phase the scheduler state and the engine's recovery state show."""
    state = view.job.state
    if state == workloads.JobState.COMPLETED:
        return recovery.Phase.SUCCEEDED
    if state == workloads.JobState.CANCELLED:
        return recovery.Phase.STOPPED
    if view.recovering:
        return recovery.Phase.RECOVERING
    if view.job.held:
        return recovery.Phase.HELD
    if state.finished:
        return recovery.Phase.FAILED
    return recovery.Phase.DEGRADED if anomaly_open else recovery.Phase.RUNNING


def _condition(  # noqa: PLR0917 -- one positional call shape keeps the condition table readable
    previous: Mapping[str, condition.Condition],
    type_: str,
    status: condition.ConditionStatus,
    reason: str,
    message: str,
    generation: int | None,
    now: datetime.datetime,
) -> condition.Condition:
    """A condition that keeps its lastTransitionTime while its status does not change."""
    before = previous.get(type_)
    since = before.last_transition_time if before is not None and before.status == status else now
    return condition.Condition(
        type=type_, status=status, reason=reason, message=message[:1024], observed_generation=generation,
        last_transition_time=since,
    )


def _ready(
    view: WorkloadView, phase: recovery.Phase, conditions: Sequence[condition.Condition],
) -> tuple[condition.ConditionStatus, str, str]:
    """Ready: True only when nothing is open, under way or waiting for someone; else why not.

    The first False among the other conditions, then the phase, decides the reason, so ``kubectl
    wait --for=condition=Ready`` and kstatus-style tools see one summary of the detailed ones."""
    by_type = {c.type: c for c in conditions}
    T, F = condition.ConditionStatus.TRUE, condition.ConditionStatus.FALSE
    resolved = by_type[condition.POLICY_RESOLVED]
    if resolved.status != T:
        return F, resolved.reason, resolved.message
    if phase == recovery.Phase.RECOVERING:
        return F, RECOVERY_IN_PROGRESS, f"recovery under way (attempt {view.job.attempt + 1})"
    if phase == recovery.Phase.HELD:
        return F, WORKLOAD_HELD, "the job is held until it is released"
    converged = by_type.get(condition.CONVERGED)
    if converged is not None and converged.reason == ABANDONED and not view.job.state.finished:
        return F, ABANDONED, converged.message
    degraded = by_type[condition.DEGRADED]
    if degraded.status == T:
        return F, ANOMALY_OPEN, degraded.message
    if phase == recovery.Phase.FAILED:
        return F, WORKLOAD_FAILED, f"the job ended in failure ({view.job.state})"
    return T, WORKLOAD_HEALTHY, f"phase {phase}, nothing open"


def project(
    view: WorkloadView,
    previous: recovery.WorkloadRecoveryStatus | None,
    *,
    generation: int | None,
    now: datetime.datetime,
) -> recovery.WorkloadRecoveryStatus:
    """The status ``view`` should have, given the ``previous`` one stored (None: none yet)."""
    anomalies = _anomalies(view)
    advice, advice_attempt = _advice(view)
    current_attempt = view.job.attempt + 1
    latest = anomalies[0] if anomalies else None
    anomaly_open = (
        latest is not None
        and latest.attempt == current_attempt
        and not view.job.state.finished
        and not (advice is not None and advice_attempt == view.job.attempt and advice.action != vocab.AdviceAction.NONE
                 and advice.disposition == vocab.Disposition.CONVERGED)
    )
    target = phase_of(view, anomaly_open)
    old_phase = previous.phase if previous is not None else None
    # The table guards against moves that make no sense, not against facts: when the scheduler says
    # the job has finished, the status follows it even if the reads in between were missed (a held
    # job that a person released and that then ran to completion between two reconcile rounds would
    # otherwise stay Held forever). Terminal phases are still kept.
    missed_ending = view.job.state.finished and old_phase is not None and old_phase not in recovery.TERMINAL
    if not recovery.allowed(old_phase, target) and not missed_ending:
        logger.warning("%s: phase %s -> %s not allowed; keeping %s", view.workload, old_phase, target, old_phase)
        target = old_phase if old_phase is not None else target

    before = {c.type: c for c in (previous.conditions if previous is not None else [])}
    T, F = condition.ConditionStatus.TRUE, condition.ConditionStatus.FALSE
    conditions = [
        _condition(before, condition.POLICY_RESOLVED, T, POLICY_FOUND,
                   f"policy {view.policy_name!r} in {view.mode} mode", generation, now)
        if view.mode is not None
        else _condition(before, condition.POLICY_RESOLVED, F, POLICY_NOT_FOUND,
                        "; ".join(view.opt_in_errors) or f"no Accepted RecoveryPolicy named {view.policy_name!r}",
                        generation, now),
        _condition(before, condition.DEGRADED, T, ANOMALY_OPEN,
                   f"{latest.symptom}: {latest.category} ({latest.verdict})", generation, now)
        if anomaly_open and latest is not None
        else _condition(before, condition.DEGRADED, F, NO_ANOMALY, "no open anomaly on the current attempt",
                        generation, now),
    ]
    if advice is not None:
        disposition = advice.disposition
        if disposition == vocab.Disposition.PENDING:
            converged = (F, RECOVERY_IN_PROGRESS, f"{advice.action} generation {advice.generation} under way")
        elif disposition == vocab.Disposition.ABANDONED:
            converged = (F, ABANDONED, f"{advice.action} generation {advice.generation} abandoned")
        elif disposition == vocab.Disposition.MONITORED:
            converged = (T, ADVICE_RECORDED, f"{advice.action} generation {advice.generation} recorded (Monitor)")
        else:
            converged = (T, DESIRED_STATE_REACHED, f"{advice.action} generation {advice.generation} verified")
        conditions.append(_condition(before, condition.CONVERGED, *converged, generation, now))
    conditions.append(_condition(before, condition.READY, *_ready(view, target, conditions), generation, now))

    previous_restarts = previous.restarts if previous is not None else 0
    return recovery.WorkloadRecoveryStatus(
        observed_generation=generation,
        phase=target,
        policy=view.policy_name[:253],
        attempt=current_attempt,
        restarts=max(previous_restarts, _restarts(view)),
        excluded_nodes=list(dict.fromkeys(view.job.excluded_nodes))[: recovery.MAX_NODES],
        last_anomaly=latest,
        advice=advice,
        recent_anomalies=anomalies,
        recent_actions=_steps(view, previous),
        conditions=conditions,
    )


def differs(view: WorkloadView, observed: Mapping[str, Any], *, now: datetime.datetime) -> bool:
    """Whether ``observed`` (an object as listed) shows another status than the projection of ``view``."""
    previous = parse_status(observed.get("status"))
    generation = (observed.get("metadata") or {}).get("generation")
    return previous != as_stored(project(view, previous, generation=generation if isinstance(generation, int) else None,
                                         now=now))


def as_stored(status: recovery.WorkloadRecoveryStatus) -> recovery.WorkloadRecoveryStatus:
    """``status`` as it reads back from the API server: times are written to the second, so a projection
    with sub-second times is compared in that form, or every round would rewrite an unchanged status."""
    return recovery.WorkloadRecoveryStatus.model_validate(status_body(status))


def parse_status(raw: Any) -> recovery.WorkloadRecoveryStatus | None:
    """The stored status, or None when absent or not ours to read (then it is rewritten)."""
    if not isinstance(raw, Mapping) or not raw:
        return None
    try:
        return recovery.WorkloadRecoveryStatus.model_validate(raw)
    except ValidationError:
        return None


def status_body(status: recovery.WorkloadRecoveryStatus) -> dict[str, Any]:
    """The status as JSON for a merge patch: ``null`` for cleared fields, so they are removed."""
    body: dict[str, Any] = status.model_dump(mode="json", by_alias=True)
    return body


def _seconds(value: object) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def names_of(items: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """Objects by metadata.name."""
    return {str((item.get("metadata") or {}).get("name")): item for item in items}
