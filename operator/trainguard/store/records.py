"""The values the audit store hands its callers: plain pydantic models and dataclasses, never ORM rows.

Place: ``store/``, beside ``tables`` (the rows) and ``sessions`` (the transactions). Every part of
the store (``workloads``, ``tails``, ``findings``, ``recoveries``, ``steps``, ``leases``,
``controls``, ``stream``) returns these; ``store.audit`` re-exports them under their old names so
``audit.TailRecord`` and the rest keep working for the engine, the shells and the tests.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
from collections.abc import Sequence
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from trainguard.model import actions, advice, times, vocab
from trainguard.store import tables


@dataclasses.dataclass(frozen=True)
class Written:
    """One audit record, as committed: what observers (the engine's metrics) are told."""

    kind: str
    workload: str
    attempt: int | None
    payload: dict[str, Any]
    decided_by: str
    at: float
    """The record's time (the engine's clock)."""
    write_s: float
    """Wall time of the transaction that wrote it, from begin to commit."""


class AuditObserver(Protocol):
    """Told about every audit record after its transaction committed (never before: a record
    that was rolled back did not happen). Must be quick and must not raise; an error is logged
    and ignored, since observing must never stop the loop it observes."""

    def audit_written(self, record: Written) -> None: ...


@dataclasses.dataclass(frozen=True)
class AuditContext:
    """Versions written into every audit row, so a record can be traced to its configuration."""

    policy_version: str = ""
    catalog_version: str = ""
    settings_fingerprint: str = ""


class AuditRecord(BaseModel):
    """One record of the unified stream (``trainguard audit``)."""

    model_config = ConfigDict(frozen=True)

    id: int
    time: datetime.datetime
    workload: str
    attempt: int | None
    kind: vocab.AuditKind
    payload: dict[str, Any]
    decided_by: str
    policy_version: str = ""
    catalog_version: str = ""
    settings_fingerprint: str = ""

    def to_json(self) -> dict[str, Any]:
        """The contract shape: ``time`` is UTC ISO 8601 with microseconds and ``+00:00``."""
        data = self.model_dump(mode="json", exclude={"time"})
        data["time"] = times.iso_utc(self.time)
        return data


class WorkloadRecord(BaseModel):
    """A tracked workload as stored."""

    model_config = ConfigDict(frozen=True)

    id: str
    scheduler: str
    job_id: str
    policy: str
    comment: str
    opt_in_errors: list[str]
    state: str
    first_seen: float
    last_seen: float
    incarnation: str = ""


class NodeImplication(BaseModel):
    """A node named as a suspect, for lemon-node memory."""

    model_config = ConfigDict(frozen=True)

    node: str
    workload: str
    category: str
    at: float
    attempt: int = 0
    """The attempt that implicated the node (0 for rows older than migration 0004)."""


class PatternFiring(BaseModel):
    """How often one catalog entry fired, read from the recorded anomalies' evidence.

    ``anomalies`` counts the anomalies whose evidence cites the pattern, ``first_cause`` those
    whose initiating line (the first evidence item) it matched, ``workloads`` the anomalies per
    workload. Detector names (``progress``, ``hang.progress_silence``, ...) appear too: they are
    evidence patterns, though not catalog entries.
    """

    model_config = ConfigDict(frozen=True)

    pattern: str
    anomalies: int
    first_cause: int
    workloads: dict[str, int]
    first: datetime.datetime
    last: datetime.datetime

    def to_json(self) -> dict[str, Any]:
        data = self.model_dump(mode="json", exclude={"first", "last"})
        data["first"], data["last"] = times.iso_utc(self.first), times.iso_utc(self.last)
        return data


class TailRecord(BaseModel):
    """Where reading one output file of one attempt stands (``signals.resume`` explains ``basis``).

    A ``signals.positions.TailPosition`` as stored: for a log store (``source`` names it) ``inode`` is
    a line count and ``offset`` a time in ns, as ``TailPosition`` explains."""

    model_config = ConfigDict(frozen=True)

    workload: str
    attempt: int
    path: str
    source: str = ""
    inode: int | None = None
    """A file's inode, or for a log store the number of lines handed out at time ``offset``."""
    offset: int
    lineno: int = 0
    fingerprint: str = ""
    basis: str = ""


class AttemptHistory(BaseModel):
    """What the store knows of one attempt, enough for a restarted engine to rebuild the policy's
    per-workload history (retries, attempts without a checkpoint, exclusions, advice generations)."""

    model_config = ConfigDict(frozen=True)

    attempt: int
    started_at: float | None = None
    ended_at: float | None = None
    checkpoint_saved: bool = False
    category: str | None = None
    """The latest verdict's category and attribution for this attempt."""
    attribution: str | None = None
    advice: list[tuple[int, str, list[str]]] = Field(default_factory=list)
    """(generation, action, exclusions) of each advice for this attempt, oldest first."""


def path_key(path: str) -> str:
    """The fixed-length key of an output file path (the unique key must fit MySQL's index limit)."""
    return hashlib.sha256(path.encode("utf-8", errors="surrogateescape")).hexdigest()


def action_record(row: tables.ActionRow) -> actions.ActionRecord:
    return actions.ActionRecord(
        workload=row.workload, attempt=row.attempt, generation=row.generation, step=row.step,
        operation=actions.Operation(row.operation), args=dict(row.args), status=actions.ActionStatus(row.status),
        error=row.error, decided_by=vocab.Decider(row.decided_by),
        created_at=times.to_epoch(row.created_at), updated_at=times.to_epoch(row.updated_at), fence=row.fence or "",
    )


def outcome_record(row: tables.OutcomeRow) -> actions.OutcomeRecord:
    return actions.OutcomeRecord(
        workload=row.workload, attempt=row.attempt, generation=row.generation,
        disposition=vocab.Disposition(row.disposition), detail=row.detail,
        decided_by=vocab.Decider(row.decided_by), at=times.to_epoch(row.at),
    )


def advice_payload(item: advice.Advice) -> dict[str, Any]:
    """The advice as stored and as shown in the audit stream (``exclusions`` is the contract name)."""
    data = item.model_dump(mode="json")
    data["exclusions"] = list(item.exclude_nodes)
    return data


@dataclasses.dataclass(frozen=True, slots=True)
class ControlRecord:
    """A cluster-wide control as stored: its value, who set it last and when (epoch seconds)."""

    name: str
    value: dict[str, Any]
    updated_by: str
    updated_at: float


@dataclasses.dataclass(frozen=True, slots=True)
class LeaseRecord:
    """One lease's latest claim as a candidate observes it: who holds it (empty: released), its
    term, and when its holder last renewed it or fenced an intent with it (the holder's clock)."""

    holder: str
    term: int
    renewed_at: float


@dataclasses.dataclass(frozen=True)
class Stored:
    """What the store holds of one known workload when it is tracked: its attempts (with verdicts and
    advice) and its read positions, read for many workloads at once (``Tracking.track_all``)."""

    facts: Sequence[AttemptHistory]
    tails: Sequence[TailRecord]
