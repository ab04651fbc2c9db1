"""The signal journal: per workload and attempt, the compact inputs every decision was made from
(``journal/``), so that a decision can be replayed and a changed policy backtested.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_TIMESTAMP = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "signal_journal",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("workload", sa.String(255), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("at", _TIMESTAMP, nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
    )
    op.create_index("ix_signal_journal_workload_id", "signal_journal", ["workload", "id"])
    op.create_index("ix_signal_journal_at", "signal_journal", ["at"])


def downgrade() -> None:
    op.drop_index("ix_signal_journal_at", table_name="signal_journal")
    op.drop_index("ix_signal_journal_workload_id", table_name="signal_journal")
    op.drop_table("signal_journal")
