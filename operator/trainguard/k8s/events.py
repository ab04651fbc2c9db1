"""Kubernetes Events for what the loop did: anomalies, verdicts, advice, outcomes.

Place in the loop: the reporting step, next to ``k8s/status.py``. The engine calls its listeners
``(kind, workload, payload)`` after each audit record; ``k8s/operator/reporting.py`` turns each into one Event
on the workload's WorkloadRecovery (``kubectl describe recovery ...`` and ``kubectl get events``
show them). The audit store stays the durable log: an Event that cannot be posted (throttling, API
down) is logged and dropped, never retried into a duplicate, and never stops the loop.

Reasons are a closed vocabulary, so alerts can match on them: the constants below, one line each.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from kubernetes_asyncio import client as k8s

from trainguard.k8s import client
from trainguard.model import times, vocab

logger = logging.getLogger(__name__)

NORMAL: Final = "Normal"
WARNING: Final = "Warning"

# Event reasons (CamelCase, part of the product's surface: users filter on them).
ANOMALY_DETECTED: Final = "AnomalyDetected"
"""A detector reported a crash, hang or straggler; the message names the category and suspect nodes."""
ATTRIBUTED: Final = "Attributed"
"""Attribution reached a verdict (hardware/system/application/unknown) for the latest anomaly."""
ADVICE_RECORDED: Final = "AdviceRecorded"
"""Monitor mode: the advice was written to the audit log; nothing was done."""
RECOVERY_STARTED: Final = "RecoveryStarted"
"""Action mode: the executor started carrying out the advice (requeue, hold, stop)."""
RECOVERY_CONVERGED: Final = "RecoveryConverged"
"""The scheduler reached the advised state (or Monitor advice was closed as recorded)."""
RECOVERY_ABANDONED: Final = "RecoveryAbandoned"
"""The advice was not carried out in time or failed; the workload was left to the scheduler."""
POLICY_ACCEPTED: Final = "PolicyAccepted"
"""A RecoveryPolicy (generation N) was read and is in force."""
POLICY_INVALID: Final = "PolicyInvalid"
"""A RecoveryPolicy was rejected; the message says which field and why."""
LEFT_ALONE: Final = "LeftAlone"
"""Somebody else's decision about the workload (a person's cancel, requeue, suspend or deletion, the
scheduler's time limit) seen, recorded and not acted on (``act.whose``)."""
NODE_OUT_OF_SERVICE: Final = "NodeOutOfService"
"""We took a node out of service (a Slurm drain; on Slinky a cordon of its Kubernetes node)."""
NODE_RETURNED: Final = "NodeReturned"
"""We put a node we had taken out of service back (``undrainAfter`` or a person's undo)."""
"""A Kubernetes node behind a suspect Slinky Slurm node was cordoned (Slinky then drains it)."""

SOURCE_COMPONENT: Final = "trainguard-operator"
MAX_MESSAGE: Final = 1024
"""Event messages are for people; the audit log has the full evidence."""


@dataclass(frozen=True)
class ObjectRef:
    """The object an Event is about (``involvedObject``)."""

    api_version: str
    kind: str
    name: str
    namespace: str
    uid: str | None = None

    def as_involved_object(self) -> dict[str, str]:
        ref = {"apiVersion": self.api_version, "kind": self.kind, "name": self.name, "namespace": self.namespace}
        if self.uid:
            ref["uid"] = self.uid
        return ref


@dataclass(frozen=True)
class Draft:
    """One Event to post: type, reason, message."""

    type: str
    reason: str
    message: str


def draft_for(kind: str, payload: Mapping[str, Any]) -> Draft | None:
    """The Event for one engine record, or None when the record kind gets none."""
    if kind == vocab.AuditKind.ANOMALY:
        nodes = ", ".join(str(n) for n in payload.get("suspect_nodes") or []) or "none named"
        return Draft(
            WARNING, ANOMALY_DETECTED,
            f"{payload.get('symptom', '?')}: {payload.get('category', '?')} (suspect nodes: {nodes})",
        )
    if kind == vocab.AuditKind.VERDICT:
        nodes = ", ".join(str(n) for n in payload.get("suspect_nodes") or payload.get("nodes") or []) or "none"
        return Draft(NORMAL, ATTRIBUTED, f"{payload.get('attribution', '?')} ({payload.get('category', '?')}); "
                                         f"nodes: {nodes}")
    if kind == vocab.AuditKind.ADVICE:
        action = payload.get("action", "?")
        excluded = ", ".join(str(n) for n in payload.get("exclude_nodes") or [])
        detail = f"{action} (generation {payload.get('generation', '?')}" + (
            f", excluding {excluded})" if excluded else ")"
        )
        if payload.get("mode") == vocab.Mode.ACTION and action != vocab.AdviceAction.NONE:
            return Draft(NORMAL, RECOVERY_STARTED, f"carrying out {detail}")
        return Draft(NORMAL, ADVICE_RECORDED, f"recorded, not carried out ({payload.get('mode', '?')} mode): {detail}")
    if kind == vocab.AuditKind.ACTION and payload.get("status") == "not-ours":
        return Draft(NORMAL, LEFT_ALONE, f"{payload.get('detail', '?')} ({payload.get('by', '?')}'s decision): "
                                         "recorded, not acted on")
    if kind == vocab.AuditKind.ACTION and payload.get("status") == "done":
        node = (payload.get("arguments") or {}).get("node")
        if payload.get("operation") == "drain_node":
            return Draft(NORMAL, NODE_OUT_OF_SERVICE, f"node {node} taken out of service (step {payload.get('step')})")
        if payload.get("operation") == "resume_node":
            return Draft(NORMAL, NODE_RETURNED, f"node {node} put back in service (step {payload.get('step')})")
    if kind == vocab.AuditKind.OUTCOME:
        disposition = payload.get("disposition")
        generation = payload.get("generation", "?")
        if disposition == vocab.Disposition.ABANDONED:
            return Draft(WARNING, RECOVERY_ABANDONED, f"generation {generation} abandoned; the scheduler's "
                                                      "default behaviour applies")
        return Draft(NORMAL, RECOVERY_CONVERGED, f"generation {generation}: {disposition}")
    return None


def event_body(ref: ObjectRef, draft: Draft, now: datetime.datetime) -> dict[str, Any]:
    """A ``core/v1`` Event (``generateName``: every record is its own Event, never merged)."""
    stamp = now.astimezone(datetime.UTC)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{ref.name[:200]}.", "namespace": ref.namespace},
        "involvedObject": ref.as_involved_object(),
        "type": draft.type,
        "reason": draft.reason,
        "message": draft.message[:MAX_MESSAGE],
        "source": {"component": SOURCE_COMPONENT},
        "reportingComponent": SOURCE_COMPONENT,
        "reportingInstance": SOURCE_COMPONENT,
        "firstTimestamp": times.rfc3339(stamp),
        "lastTimestamp": times.rfc3339(stamp),
        "eventTime": times.rfc3339(stamp, micro=True),
        "action": draft.reason,
        "count": 1,
    }


async def post(api: client.ApiClient, ref: ObjectRef, draft: Draft, now: datetime.datetime) -> bool:
    """Post one Event; False (logged) when the API refused or failed. Events are best effort."""
    try:
        await k8s.CoreV1Api(api).create_namespaced_event(ref.namespace, client.body_of(event_body(ref, draft, now)))
    except client.API_ERRORS as exc:
        logger.warning("could not post Event %s on %s/%s: %s", draft.reason, ref.namespace, ref.name,
                       client.message_of(exc))
        return False
    return True
