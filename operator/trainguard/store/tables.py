"""The audit database schema as SQLAlchemy 2 declarative models.

Place in the loop: the bottom of ``store/``. ``audit.py`` (the repository) is the only
module that queries these tables; nothing outside ``store/`` sees an ORM object. The
Alembic migrations in ``alembic/versions/`` (0001 and those after it) create the same schema;
a test compares the two.

Portability (SQLite, PostgreSQL, MySQL/MariaDB): only generic types; JSON is SQLAlchemy
``JSON``; timestamps are ``UtcDateTime`` (timezone-aware on PostgreSQL, microsecond
``DATETIME(6)`` on MySQL, text on SQLite) and always come back as aware UTC datetimes.
Unique constraints make idempotence enforceable by the database itself: one advice per
(workload, attempt, generation), one action row per (workload, attempt, generation, step),
one outcome per advice.
"""

from __future__ import annotations

import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import orm
from sqlalchemy.dialects import mysql

ID_LEN = 255
"""Workload ids, job ids and node names: bounded so MySQL can index them."""
FENCE_LEN = 600
"""A fencing token as text: holder and lease (ID_LEN each) and the term."""


def timestamp_type() -> sa.types.TypeEngine[datetime.datetime]:
    """The column type behind ``UtcDateTime``; the migration uses it too."""
    return sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


class UtcDateTime(sa.types.TypeDecorator[datetime.datetime]):
    """A timestamp stored with microseconds and read back as an aware UTC datetime.

    SQLite and MySQL drop the offset, so values are normalised to UTC on the way in and
    tagged UTC on the way out.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: sa.Dialect) -> sa.types.TypeEngine[Any]:
        if dialect.name in ("mysql", "mariadb"):
            return dialect.type_descriptor(mysql.DATETIME(fsp=6))
        return dialect.type_descriptor(sa.DateTime(timezone=True))

    def process_bind_param(self, value: datetime.datetime | None, dialect: sa.Dialect) -> datetime.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: audit timestamps must be timezone-aware")
        utc = value.astimezone(datetime.UTC)
        return utc if dialect.name == "postgresql" else utc.replace(tzinfo=None)

    def process_result_value(self, value: datetime.datetime | None, dialect: sa.Dialect) -> datetime.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=datetime.UTC)
        return value.astimezone(datetime.UTC)


class Base(orm.DeclarativeBase):
    """Declarative base of every audit table."""

    type_annotation_map = {  # noqa: RUF012 - SQLAlchemy's documented class-level mapping
        datetime.datetime: UtcDateTime(),
        dict[str, Any]: sa.JSON(),
        list[Any]: sa.JSON(),
    }


def _workload_fk() -> orm.Mapped[str]:
    return orm.mapped_column(sa.String(ID_LEN), sa.ForeignKey("workloads.id"), index=True)


class Workload(Base):
    """A tracked (opted-in) workload."""

    __tablename__ = "workloads"
    __table_args__ = (
        # The HTTP API's keyset pages (store.queries): sorted by (last_seen, id) or (first_seen, id).
        sa.Index("ix_workloads_last_seen_id", "last_seen", "id"),
        sa.Index("ix_workloads_first_seen_id", "first_seen", "id"),
        sa.Index("ix_workloads_state", "state"),
    )

    id: orm.Mapped[str] = orm.mapped_column(sa.String(ID_LEN), primary_key=True)
    scheduler: orm.Mapped[str] = orm.mapped_column(sa.String(64), default="")
    job_id: orm.Mapped[str] = orm.mapped_column(sa.String(ID_LEN), default="")
    policy: orm.Mapped[str] = orm.mapped_column(sa.String(ID_LEN), default="")
    comment: orm.Mapped[str] = orm.mapped_column(sa.Text, default="")
    opt_in_errors: orm.Mapped[list[Any]] = orm.mapped_column(default=list)
    state: orm.Mapped[str] = orm.mapped_column(sa.String(32), default="")
    first_seen: orm.Mapped[datetime.datetime]
    last_seen: orm.Mapped[datetime.datetime]
    incarnation: orm.Mapped[str] = orm.mapped_column(sa.String(128), default="", server_default="")
    """The object the id named when last tracked (``JobSnapshot.incarnation``, migration 0012); a
    new one retires this history under another id (``AuditStore.retire_incarnation``)."""


class Attempt(Base):
    """One run (restart) of a workload."""

    __tablename__ = "attempts"
    __table_args__ = (sa.UniqueConstraint("workload", "attempt", name="uq_attempts_key"),)

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True, autoincrement=True)
    workload: orm.Mapped[str] = _workload_fk()
    attempt: orm.Mapped[int]
    started_at: orm.Mapped[datetime.datetime | None]
    ended_at: orm.Mapped[datetime.datetime | None]
    checkpoint_saved: orm.Mapped[bool] = orm.mapped_column(default=False)
    state: orm.Mapped[str] = orm.mapped_column(sa.String(32), default="")
    nodes: orm.Mapped[list[Any] | None]
    """The nodes the scheduler placed this attempt on (migration 0004); None before it was seen
    running. Their union over a workload's attempts is the only set of nodes Trainguard may name
    as suspects, exclude, drain or remember in node history."""
    last_checkpoint_at: orm.Mapped[datetime.datetime | None]
    """When the attempt's latest checkpoint line was read (migration 0009); None: no checkpoint seen.
    Goodput accounting counts the work between it and a failure as lost."""


class AnomalyRow(Base):
    """A detection (model.anomalies.Anomaly) for one attempt."""

    __tablename__ = "anomalies"

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True, autoincrement=True)
    workload: orm.Mapped[str] = _workload_fk()
    attempt: orm.Mapped[int]
    symptom: orm.Mapped[str] = orm.mapped_column(sa.String(32))
    category: orm.Mapped[str] = orm.mapped_column(sa.String(64))
    payload: orm.Mapped[dict[str, Any]]
    at: orm.Mapped[datetime.datetime]


class VerdictRow(Base):
    """An attribution (model.verdicts.Verdict) for one attempt."""

    __tablename__ = "verdicts"

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True, autoincrement=True)
    workload: orm.Mapped[str] = _workload_fk()
    attempt: orm.Mapped[int]
    attribution: orm.Mapped[str] = orm.mapped_column(sa.String(32))
    category: orm.Mapped[str] = orm.mapped_column(sa.String(64))
    payload: orm.Mapped[dict[str, Any]]
    at: orm.Mapped[datetime.datetime]


class AdviceRow(Base):
    """One advice generation: the desired state, written before anything is done."""

    __tablename__ = "advice"
    __table_args__ = (sa.UniqueConstraint("workload", "attempt", "generation", name="uq_advice_key"),)

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True, autoincrement=True)
    workload: orm.Mapped[str] = _workload_fk()
    attempt: orm.Mapped[int]
    generation: orm.Mapped[int]
    action: orm.Mapped[str] = orm.mapped_column(sa.String(32))
    mode: orm.Mapped[str] = orm.mapped_column(sa.String(16))
    payload: orm.Mapped[dict[str, Any]]
    deadline: orm.Mapped[datetime.datetime | None]
    disposition: orm.Mapped[str] = orm.mapped_column(sa.String(16), index=True)
    decided_by: orm.Mapped[str] = orm.mapped_column(sa.String(32))
    created_at: orm.Mapped[datetime.datetime]
    updated_at: orm.Mapped[datetime.datetime]


class ActionRow(Base):
    """One named step of one advice generation: intent first, then its result."""

    __tablename__ = "actions"
    __table_args__ = (sa.UniqueConstraint("workload", "attempt", "generation", "step", name="uq_actions_key"),
                      sa.Index("ix_actions_operation", "operation"))

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True, autoincrement=True)
    advice_id: orm.Mapped[int] = orm.mapped_column(sa.ForeignKey("advice.id"), index=True)
    workload: orm.Mapped[str] = _workload_fk()
    attempt: orm.Mapped[int]
    generation: orm.Mapped[int]
    step: orm.Mapped[str] = orm.mapped_column(sa.String(ID_LEN))
    operation: orm.Mapped[str] = orm.mapped_column(sa.String(32))
    args: orm.Mapped[dict[str, Any]]
    status: orm.Mapped[str] = orm.mapped_column(sa.String(16), index=True)
    error: orm.Mapped[str] = orm.mapped_column(sa.Text, default="")
    decided_by: orm.Mapped[str] = orm.mapped_column(sa.String(32))
    created_at: orm.Mapped[datetime.datetime]
    updated_at: orm.Mapped[datetime.datetime]
    fence: orm.Mapped[str | None] = orm.mapped_column(sa.String(FENCE_LEN), default=None)
    """Leadership token the intent was committed with (``holder@lease#term``); None: standalone."""


class LeadershipRow(Base):
    """The latest leadership claim per Lease: the fencing token every action intent must carry.

    ``term`` only grows (each claim is the previous term + 1), so a replica that lost its Lease holds
    a smaller term than the row and its intents are refused (``AuditStore.begin_action``).
    Migration ``0003_fencing.py``.
    """

    __tablename__ = "leadership"

    lease: orm.Mapped[str] = orm.mapped_column(sa.String(ID_LEN), primary_key=True)
    holder: orm.Mapped[str] = orm.mapped_column(sa.String(ID_LEN))
    term: orm.Mapped[int]
    claimed_at: orm.Mapped[datetime.datetime]
    last_fenced_at: orm.Mapped[datetime.datetime]
    """Written by every fenced intent: the write locks the row until the intent commits, so a claim
    waits for it (or the intent sees the claim); both orders are safe."""


class OutcomeRow(Base):
    """How one advice generation ended; at most one per advice."""

    __tablename__ = "outcomes"

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True, autoincrement=True)
    advice_id: orm.Mapped[int] = orm.mapped_column(sa.ForeignKey("advice.id"), unique=True)
    workload: orm.Mapped[str] = _workload_fk()
    attempt: orm.Mapped[int]
    generation: orm.Mapped[int]
    disposition: orm.Mapped[str] = orm.mapped_column(sa.String(16))
    detail: orm.Mapped[str] = orm.mapped_column(sa.Text, default="")
    decided_by: orm.Mapped[str] = orm.mapped_column(sa.String(32))
    at: orm.Mapped[datetime.datetime]


class NodeHistoryRow(Base):
    """A node implicated in a failure (lemon-node memory across jobs)."""

    __tablename__ = "node_history"
    __table_args__ = (sa.Index("ix_node_history_node_at", "node", "at"),)

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True, autoincrement=True)
    node: orm.Mapped[str] = orm.mapped_column(sa.String(ID_LEN))
    workload: orm.Mapped[str] = _workload_fk()
    attempt: orm.Mapped[int | None]
    """The attempt that implicated the node (migration 0004; None on older rows): lemon memory
    counts one incident per (workload, attempt)."""
    category: orm.Mapped[str] = orm.mapped_column(sa.String(64))
    at: orm.Mapped[datetime.datetime]


class AuditLogRow(Base):
    """The unified, append-only record stream behind ``trainguard audit``.

    Written in the same transaction as the row it describes, so the two never disagree.
    ``id`` orders records that share a timestamp.
    """

    __tablename__ = "audit_log"
    __table_args__ = (
        sa.Index("ix_audit_log_workload_id", "workload", "id"),
        # Audit search by kind / producer, newest first (migration 0007).
        sa.Index("ix_audit_log_kind_id", "kind", "id"),
        sa.Index("ix_audit_log_decided_by_id", "decided_by", "id"),
    )

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True, autoincrement=True)
    time: orm.Mapped[datetime.datetime] = orm.mapped_column(index=True)
    workload: orm.Mapped[str] = orm.mapped_column(sa.String(ID_LEN))
    attempt: orm.Mapped[int | None]
    kind: orm.Mapped[str] = orm.mapped_column(sa.String(16))
    """Indexed by ``ix_audit_log_kind_id`` (its own index was dropped in migration 0011)."""
    payload: orm.Mapped[dict[str, Any]]
    decided_by: orm.Mapped[str] = orm.mapped_column(sa.String(32))
    policy_version: orm.Mapped[str] = orm.mapped_column(sa.String(128), default="")
    catalog_version: orm.Mapped[str] = orm.mapped_column(sa.String(128), default="")
    settings_fingerprint: orm.Mapped[str] = orm.mapped_column(sa.String(128), default="")


class TailPositionRow(Base):
    """Where reading one output file of one attempt stands, so a restart resumes there.

    One row per (workload, attempt, file); ``path_key`` (a hash of the path) keeps the unique
    key short enough for MySQL's index limit, ``path`` keeps the file name itself. ``basis``
    says how the start of the attempt in the file was found (``signals.resume``): an
    ``unknown`` row is the record that earlier content was skipped, not judged.
    """

    __tablename__ = "tail_positions"
    __table_args__ = (sa.UniqueConstraint("workload", "attempt", "path_key", name="uq_tail_positions_key"),)

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True, autoincrement=True)
    workload: orm.Mapped[str] = _workload_fk()
    attempt: orm.Mapped[int]
    path_key: orm.Mapped[str] = orm.mapped_column(sa.String(64))
    path: orm.Mapped[str] = orm.mapped_column(sa.Text)
    source: orm.Mapped[str] = orm.mapped_column(sa.String(16), default="")
    inode: orm.Mapped[int | None] = orm.mapped_column(sa.BigInteger)
    """A file's inode; for a log store (Loki, VictoriaLogs, pod logs) the number of lines handed
    out at the time in ``byte_offset`` (``signals.positions.TailPosition``)."""
    byte_offset: orm.Mapped[int] = orm.mapped_column(sa.BigInteger)
    lineno: orm.Mapped[int] = orm.mapped_column(sa.BigInteger)
    fingerprint: orm.Mapped[str] = orm.mapped_column(sa.String(64), default="")
    basis: orm.Mapped[str] = orm.mapped_column(sa.String(16), default="")
    updated_at: orm.Mapped[datetime.datetime]


class ScorecardSnapshotRow(Base):
    """What the scheduler showed after a Monitor-mode advice (migration 0010), kept because the scheduler
    forgets: a purged job's excluded nodes, a drain resumed later. One row per change seen;
    ``attempt`` is the advised attempt, ``nodes`` the blamed nodes' ``{name: {state, reason}}``."""

    __tablename__ = "scorecard_snapshots"

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True, autoincrement=True)
    workload: orm.Mapped[str] = _workload_fk()
    attempt: orm.Mapped[int]
    job_state: orm.Mapped[str] = orm.mapped_column(sa.String(32))
    restarts: orm.Mapped[int | None]
    excluded_nodes: orm.Mapped[list[Any]]
    job_nodes: orm.Mapped[list[Any]]
    nodes: orm.Mapped[dict[str, Any]]
    at: orm.Mapped[datetime.datetime]
class JournalRow(Base):
    """One entry of the signal journal (migration 0008): what a decision was made from.

    ``payload`` is a ``journal.entries`` model as JSON; ``size`` its length in characters, so the
    per-workload cap is enforced without reading payloads back. No foreign key to ``workloads``:
    the journal is pruned on its own schedule and must not hold up the audit tables.
    """

    __tablename__ = "signal_journal"
    __table_args__ = (
        sa.Index("ix_signal_journal_workload_id", "workload", "id"),
        sa.Index("ix_signal_journal_at", "at"),
    )

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True, autoincrement=True)
    workload: orm.Mapped[str] = orm.mapped_column(sa.String(ID_LEN))
    attempt: orm.Mapped[int]
    kind: orm.Mapped[str] = orm.mapped_column(sa.String(16))
    at: orm.Mapped[datetime.datetime]
    size: orm.Mapped[int] = orm.mapped_column(default=0)
    payload: orm.Mapped[dict[str, Any]]


class ControlRow(Base):
    """A cluster-wide control a person sets at run time (migration 0013): ``actions-paused`` (the
    runtime pause every step of every recovery reads before touching the scheduler). One row per
    control, overwritten on change; every change is also an audit record, so the history stays."""

    __tablename__ = "controls"

    name: orm.Mapped[str] = orm.mapped_column(sa.String(64), primary_key=True)
    value: orm.Mapped[dict[str, Any]]
    """The control's state, e.g. ``{"paused": true, "reason": "..."}``."""
    updated_by: orm.Mapped[str] = orm.mapped_column(sa.String(ID_LEN))
    updated_at: orm.Mapped[datetime.datetime]


class NodeLifecycleRow(Base):
    """One transition of a node's lifecycle (migration 0014, ``model.lifecycle``): appended, never
    changed; a node's state is its latest row. Written in the same transaction as the record that
    caused it (a verdict, our drain or resume) or as a person's decision (hold, return) with who it was.
    No foreign key to ``workloads``: a person's decision names no workload."""

    __tablename__ = "node_lifecycle"
    __table_args__ = (sa.Index("ix_node_lifecycle_node_id", "node", "id"),)

    id: orm.Mapped[int] = orm.mapped_column(primary_key=True, autoincrement=True)
    node: orm.Mapped[str] = orm.mapped_column(sa.String(ID_LEN))
    state: orm.Mapped[str] = orm.mapped_column(sa.String(32))
    event: orm.Mapped[str] = orm.mapped_column(sa.String(32))
    reason: orm.Mapped[str] = orm.mapped_column(sa.Text)
    by: orm.Mapped[str] = orm.mapped_column(sa.String(ID_LEN))
    workload: orm.Mapped[str] = orm.mapped_column(sa.String(ID_LEN))
    attempt: orm.Mapped[int | None]
    evidence: orm.Mapped[dict[str, Any]]
    at: orm.Mapped[datetime.datetime]
