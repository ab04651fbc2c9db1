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

One exception to "this very attempt": Slurm's own requeue teardown line (``... CANCELLED AT ...
DUE TO JOB REQUEUE ***``) can reach the file after the engine last looked at it while the job was
pending and before the next attempt started, so it is read as the *next* attempt's first line.
That line names the requeue itself, so it is our effect when we requeued the previous attempt.

Pure: the caller passes the action rows.
"""

from __future__ import annotations

from collections.abc import Sequence

from trainguard.detect import first_cause
from trainguard.model import actions, anomalies, vocab

TERMINATING = (actions.Operation.REQUEUE, actions.Operation.REQUEUE_HOLD, actions.Operation.CANCEL)
"""Operations that end the running tasks of the attempt they act on."""
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

    def caused(row: actions.ActionRecord) -> bool:
        if row.attempt == attempt:
            return row.operation in TERMINATING
        return late_requeue_line and row.attempt == attempt - 1 and row.operation in _REQUEUES

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
