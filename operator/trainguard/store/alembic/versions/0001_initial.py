"""Initial audit schema: workloads, attempts, anomalies, verdicts, advice, actions, outcomes,
node_history and the append-only audit_log.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

ID_LEN = 255


def _ts(name: str, *, nullable: bool = False, index: bool = False) -> sa.Column[object]:
    kind = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
    return sa.Column(name, kind, nullable=nullable, index=index)


def _workload() -> sa.Column[object]:
    return sa.Column("workload", sa.String(ID_LEN), sa.ForeignKey("workloads.id"), nullable=False, index=True)


def _id() -> sa.Column[object]:
    return sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True)


def upgrade() -> None:
    op.create_table(
        "workloads",
        sa.Column("id", sa.String(ID_LEN), primary_key=True),
        sa.Column("scheduler", sa.String(64), nullable=False),
        sa.Column("job_id", sa.String(ID_LEN), nullable=False),
        sa.Column("policy", sa.String(ID_LEN), nullable=False),
        sa.Column("comment", sa.Text(), nullable=False),
        sa.Column("opt_in_errors", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        _ts("first_seen"),
        _ts("last_seen"),
    )
    op.create_table(
        "attempts",
        _id(),
        _workload(),
        sa.Column("attempt", sa.Integer(), nullable=False),
        _ts("started_at", nullable=True),
        _ts("ended_at", nullable=True),
        sa.Column("checkpoint_saved", sa.Boolean(), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.UniqueConstraint("workload", "attempt", name="uq_attempts_key"),
    )
    for name, columns in (
        ("anomalies", [sa.Column("symptom", sa.String(32), nullable=False)]),
        ("verdicts", [sa.Column("attribution", sa.String(32), nullable=False)]),
    ):
        op.create_table(
            name,
            _id(),
            _workload(),
            sa.Column("attempt", sa.Integer(), nullable=False),
            *columns,
            sa.Column("category", sa.String(64), nullable=False),
            sa.Column("payload", sa.JSON(), nullable=False),
            _ts("at"),
        )
    op.create_table(
        "advice",
        _id(),
        _workload(),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        _ts("deadline", nullable=True),
        sa.Column("disposition", sa.String(16), nullable=False, index=True),
        sa.Column("decided_by", sa.String(32), nullable=False),
        _ts("created_at"),
        _ts("updated_at"),
        sa.UniqueConstraint("workload", "attempt", "generation", name="uq_advice_key"),
    )
    op.create_table(
        "actions",
        _id(),
        sa.Column("advice_id", sa.Integer(), sa.ForeignKey("advice.id"), nullable=False, index=True),
        _workload(),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("step", sa.String(ID_LEN), nullable=False),
        sa.Column("operation", sa.String(32), nullable=False),
        sa.Column("args", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False, index=True),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("decided_by", sa.String(32), nullable=False),
        _ts("created_at"),
        _ts("updated_at"),
        sa.UniqueConstraint("workload", "attempt", "generation", "step", name="uq_actions_key"),
    )
    op.create_table(
        "outcomes",
        _id(),
        sa.Column("advice_id", sa.Integer(), sa.ForeignKey("advice.id"), nullable=False, unique=True),
        _workload(),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("disposition", sa.String(16), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("decided_by", sa.String(32), nullable=False),
        _ts("at"),
    )
    op.create_table(
        "node_history",
        _id(),
        sa.Column("node", sa.String(ID_LEN), nullable=False),
        _workload(),
        sa.Column("category", sa.String(64), nullable=False),
        _ts("at"),
        sa.Index("ix_node_history_node_at", "node", "at"),
    )
    op.create_table(
        "audit_log",
        _id(),
        _ts("time", index=True),
        sa.Column("workload", sa.String(ID_LEN), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(16), nullable=False, index=True),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("decided_by", sa.String(32), nullable=False),
        sa.Column("policy_version", sa.String(128), nullable=False),
        sa.Column("catalog_version", sa.String(128), nullable=False),
        sa.Column("settings_fingerprint", sa.String(128), nullable=False),
        sa.Index("ix_audit_log_workload_id", "workload", "id"),
    )


def downgrade() -> None:
    for name in ("audit_log", "node_history", "outcomes", "actions", "advice", "verdicts", "anomalies", "attempts"):
        op.drop_table(name)
    op.drop_table("workloads")
