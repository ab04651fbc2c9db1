"""The node lifecycle: one row per transition of a node (in service, suspect, out of service,
validating, held for repair, other), appended in the transaction of the record that caused it.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

ID_LEN = 255


def upgrade() -> None:
    op.create_table(
        "node_lifecycle",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("node", sa.String(ID_LEN), nullable=False),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("by", sa.String(ID_LEN), nullable=False),
        sa.Column("workload", sa.String(ID_LEN), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=True),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb"),
                  nullable=False),
    )
    op.create_index("ix_node_lifecycle_node_id", "node_lifecycle", ["node", "id"])


def downgrade() -> None:
    op.drop_index("ix_node_lifecycle_node_id", table_name="node_lifecycle")
    op.drop_table("node_lifecycle")
