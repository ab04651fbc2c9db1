"""Attempt allocations and per-attempt lemon memory: ``attempts.nodes`` (the nodes the scheduler
placed the attempt on, a JSON list) and ``node_history.attempt``.

Both columns are nullable so that existing rows stay valid: an attempt recorded before this
revision has no known allocation (so none of its nodes can be acted on from log text), and an
older implication counts as attempt 0 of its workload.

Revision ID: 0004
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("nodes", sa.JSON(), nullable=True))
    with op.batch_alter_table("node_history") as batch:
        batch.add_column(sa.Column("attempt", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("node_history") as batch:
        batch.drop_column("attempt")
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("nodes")
