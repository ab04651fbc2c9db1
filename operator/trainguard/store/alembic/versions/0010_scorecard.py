"""Scorecard snapshots: what the scheduler showed after a Monitor-mode advice, kept because it forgets.

One row per change seen (job state, restart count, excluded nodes, the blamed nodes' state and
reason), written by the engine's scorecard watch (``observe/scorecard_watch.py``) for a while after
each Monitor-mode advice; ``trainguard scorecard`` reads them beside the scheduler's current view.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

ID_LEN = 255


def upgrade() -> None:
    op.create_table(
        "scorecard_snapshots",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("workload", sa.String(ID_LEN), sa.ForeignKey("workloads.id"), nullable=False, index=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("job_state", sa.String(32), nullable=False),
        sa.Column("restarts", sa.Integer(), nullable=True),
        sa.Column("excluded_nodes", sa.JSON(), nullable=False),
        sa.Column("job_nodes", sa.JSON(), nullable=False),
        sa.Column("nodes", sa.JSON(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb"),
                  nullable=False),
    )


def downgrade() -> None:
    op.drop_table("scorecard_snapshots")
