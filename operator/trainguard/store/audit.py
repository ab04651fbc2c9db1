"""The audit repository: every record of the loop, durable before anything is done.

Place in the loop: the sink of every stage (anomaly, verdict, advice, action, outcome,
watchdog) and the memory of the executor (``act/``), which reads back its own action rows
after a restart to resume instead of repeating. Callers get plain pydantic values
(``store.records``), never ORM objects. Each write is one transaction that also appends to
``audit_log``, the unified stream ``trainguard audit`` prints, so the stream and the tables
cannot disagree (``store.sessions``).

``AuditStore`` is a facade over one part per responsibility, each the implementation of what
its callers declare they need:

- ``workloads.WorkloadStore``: tracked workloads, attempts, incarnations;
- ``tails.TailStore``: read positions (``signals.resume``);
- ``findings.FindingStore``: anomalies, verdicts, lemon-node memory, pattern firings;
- ``recoveries.RecoveryStore`` and ``steps.ActionStore``: advice, action steps, outcomes and
  watchdog records, together ``act.ports.Ledger``;
- ``leases.LeaseStore``: leadership and database leases (``shards.StoreLeases``), fencing;
- ``controls.ControlStore``: the pause and breaker controls (``act.switch.Controls``) and the
  blast-radius reservations (``store.ledger``);
- ``stream.StreamStore``: the unified stream, and a person's API actions written into it;
- ``nodes.NodeStore``: the node lifecycle (``model.lifecycle``), written with the records that move it.

Idempotence is enforced by unique keys (see ``tables``): writing an advice or an action
intent a second time returns what is already there instead of a duplicate. Errors are
raised, never swallowed: a record that cannot be written must stop the action it precedes.

The values and helpers once defined here are re-exported, so ``audit.TailRecord``,
``audit.to_datetime`` and the rest keep working.
"""

from __future__ import annotations

from trainguard.model.times import iso_utc, to_datetime, to_epoch
from trainguard.store import controls, findings, leases, nodes, recoveries, steps, stream, tails, workloads
from trainguard.store.records import (
    AttemptHistory,
    AuditContext,
    AuditObserver,
    AuditRecord,
    ControlRecord,
    LeaseRecord,
    NodeImplication,
    PatternFiring,
    Stored,
    TailRecord,
    WorkloadRecord,
    Written,
    advice_payload,
    path_key,
)
from trainguard.store.sessions import GROUP_MAX

__all__ = [
    "GROUP_MAX",
    "AttemptHistory",
    "AuditContext",
    "AuditObserver",
    "AuditRecord",
    "AuditStore",
    "ControlRecord",
    "LeaseRecord",
    "NodeImplication",
    "PatternFiring",
    "Stored",
    "TailRecord",
    "WorkloadRecord",
    "Written",
    "advice_payload",
    "iso_utc",
    "path_key",
    "to_datetime",
    "to_epoch",
]


class AuditStore(
    workloads.WorkloadStore, tails.TailStore, findings.FindingStore, recoveries.RecoveryStore, steps.ActionStore,
    leases.LeaseStore, controls.ControlStore, stream.StreamStore, nodes.NodeStore,
):
    """Async repository over one database. Create it with ``database.open_store``."""
