"""Engine records -> Kubernetes Events (k8s/events.py): which reason, which type, what the message says."""

from __future__ import annotations

import datetime

from trainguard.k8s import events


def test_each_record_kind_maps_to_its_reason() -> None:
    anomaly = events.draft_for("anomaly", {"symptom": "crash", "category": "nccl_timeout", "suspect_nodes": ["n2"]})
    assert anomaly == events.Draft(events.WARNING, events.ANOMALY_DETECTED,
                                   "crash: nccl_timeout (suspect nodes: n2)")
    monitor = events.draft_for("advice", {"action": "requeue", "mode": "Monitor", "generation": 1})
    assert monitor is not None and monitor.reason == events.ADVICE_RECORDED
    action = events.draft_for("advice", {"action": "requeue", "mode": "Action", "generation": 2,
                                         "exclude_nodes": ["n2"]})
    assert action is not None and (action.reason, action.message) == (
        events.RECOVERY_STARTED, "carrying out requeue (generation 2, excluding n2)")
    abandoned = events.draft_for("outcome", {"generation": 2, "disposition": "Abandoned"})
    assert abandoned is not None and (abandoned.type, abandoned.reason) == (events.WARNING, events.RECOVERY_ABANDONED)
    assert events.draft_for("action", {}) is None


def test_event_body_names_the_object_and_is_never_merged() -> None:
    ref = events.ObjectRef("trainguard.dev/v1alpha1", "WorkloadRecovery", "slurm-c-1", "ns", "uid-1")
    body = events.event_body(ref, events.Draft(events.NORMAL, events.ATTRIBUTED, "x" * 5000),
                             datetime.datetime(2026, 1, 31, 12, 0, tzinfo=datetime.UTC))
    assert body["involvedObject"] == {"apiVersion": "trainguard.dev/v1alpha1", "kind": "WorkloadRecovery",
                                      "name": "slurm-c-1", "namespace": "ns", "uid": "uid-1"}
    assert body["metadata"]["generateName"] == "slurm-c-1."
    assert len(body["message"]) == events.MAX_MESSAGE
    assert body["lastTimestamp"] == "2026-01-31T12:00:00Z"
