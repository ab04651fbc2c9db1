"""Whether an anomaly is only the effect of our own requeue or cancel of the same attempt.

Place in the loop: the engine asks ``effect_of`` before it records an anomaly. When we requeue or
cancel an attempt whose tasks are still running, Slurm terminates them and the job output fills
with kill lines (``*** STEP 12.0 ON node1 CANCELLED AT ... DUE TO JOB REQUEUE ***``,
``srun: error: node2: task 1: Terminated``, ``srun: Job step aborted``, peers' ``Connection
closed by peer``). Read as a failure, that teardown becomes a new ``process_signal_killed``
anomaly of the attempt: a verdict whose suspect nodes enter lemon-node memory, and perhaps an
advice. It is what we did, so it is recorded as evidence of our action instead.

The rule, kept narrow so that a real failure is never explained away:

* we began a task-terminating operation (``requeue``, ``requeue_hold``, ``cancel``) for this
  very (workload, attempt), and it was meant to act (status ``intent`` or ``done``: ``skipped``
  means Monitor mode, where nothing was done and a kill is someone else's);
* the anomaly is a crash whose initiating line is a kill or teardown symptom (first-cause class
  "killed" or "cascade") — hardware, OOM, CUDA or Python errors stay anomalies even if printed
  during the teardown;
* its initiating line was read after we began that operation (same clock, the engine's).

Two exceptions to "this very attempt", for teardown read as the *next* attempt's:

* Slurm's own requeue teardown line (``... CANCELLED AT ... DUE TO JOB REQUEUE ***``) can reach the
  file after the engine last looked at it while the job was pending and before the next attempt
  started. That line names the requeue itself, so it is our effect when we requeued the previous
  attempt.
* A teardown line seen while our restart of the previous attempt held the job: after our hold was
  placed (its row shows the hold seen) and before our release of it was done. The next attempt's
  tasks cannot run before that release, so the line is the old attempt's — a Kubernetes pod our
  suspend takes away, killed on its way out (its ending line is stamped with the container's
  finish time, or with the time it was read when the runtime gave none).

Pure: the caller passes the action rows (the terminating ones, and our releases).
"""

from __future__ import annotations

from collections.abc import Sequence

from trainguard.detect import first_cause
from trainguard.model import actions, anomalies, vocab

TERMINATING = (actions.Operation.REQUEUE, actions.Operation.REQUEUE_HOLD, actions.Operation.CANCEL)
"""Operations that end the running tasks of the attempt they act on."""
CONSULTED = (*TERMINATING, actions.Operation.RELEASE)
"""The rows ``effect_of`` reads: the terminating operations, and the releases that end our holds."""
WINDOW_S = 3600.0
"""How long after our operation its teardown can still be read (slow filesystems, long grace)."""
_MEANT = frozenset({actions.ActionStatus.INTENT, actions.ActionStatus.DONE})
_TEARDOWN = frozenset({first_cause.Rank.KILLED, first_cause.Rank.CASCADE})
_REQUEUES = frozenset({actions.Operation.REQUEUE, actions.Operation.REQUEUE_HOLD})
REQUEUE_TEARDOWN = "DUE TO JOB REQUEUE"
"""What slurmstepd prints on a step it kills because the job was requeued."""


def is_teardown(anomaly: anomalies.Anomaly) -> bool:
    """Whether ``anomaly`` is a crash whose initiating line is a kill or teardown symptom (first-cause
    class "killed" or "cascade"): what a cancel, a requeue or a time limit prints, whoever asked for it.
    Hardware, OOM, CUDA or Python errors are not, even when printed during a teardown."""
    if anomaly.symptom != vocab.Symptom.CRASH or not anomaly.evidence:
        return False
    return first_cause.classify(anomaly.evidence[0]) in _TEARDOWN


def effect_of(
    anomaly: anomalies.Anomaly, *, workload: str, attempt: int, ours: Sequence[actions.ActionRecord]
) -> actions.ActionRecord | None:
    """Our action whose effect ``anomaly`` is, or None when the anomaly is a failure in its own right."""
    if not is_teardown(anomaly):
        return None
    initiating = anomaly.evidence[0]
    seen = initiating.at if initiating.at is not None else anomaly.detected_at
    if seen is None:
        return None
    late_requeue_line = REQUEUE_TEARDOWN in initiating.text
    released = {(row.workload, row.attempt, row.generation) for row in ours
                if row.operation == actions.Operation.RELEASE and row.status == actions.ActionStatus.DONE
                and row.updated_at <= seen}

    def caused(row: actions.ActionRecord) -> bool:
        if row.attempt == attempt:
            return row.operation in TERMINATING
        if row.attempt != attempt - 1 or row.operation not in _REQUEUES:
            return False
        return late_requeue_line or (
            row.operation == actions.Operation.REQUEUE_HOLD and actions.HOLD_SEEN in row.args
            and (row.workload, row.attempt, row.generation) not in released)

    candidates = [
        row for row in ours
        if row.workload == workload and caused(row) and row.status in _MEANT and row.created_at <= seen
    ]
    return max(candidates, key=lambda row: row.created_at, default=None)


def effect_payload(anomaly: anomalies.Anomaly, row: actions.ActionRecord, advice_action: str = "") -> dict[str, object]:
    """The audit record of an observed effect: an ``action`` record with status ``effect``."""
    return {
        "operation": row.operation.value,
        "step": row.step,
        "status": "effect",
        "arguments": dict(row.args),
        "generation": row.generation,
        "action": advice_action,
        "error": "",
        "effect": {
            "category": anomaly.category.value,
            "summary": anomaly.summary,
            "suspect_nodes": list(anomaly.suspect_nodes),
            "first_seen_at": anomaly.first_seen_at,
            "evidence": [
                {"line": e.line, "text": e.text, "pattern": e.pattern, "node": e.node} for e in anomaly.evidence[:10]
            ],
        },
    }
