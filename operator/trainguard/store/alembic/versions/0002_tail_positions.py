"""Tail positions: where reading each output file of each attempt stands, for exact resumption.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

ID_LEN = 255


def upgrade() -> None:
    op.create_table(
        "tail_positions",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("workload", sa.String(ID_LEN), sa.ForeignKey("workloads.id"), nullable=False, index=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("path_key", sa.String(64), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("inode", sa.BigInteger(), nullable=True),
        sa.Column("byte_offset", sa.BigInteger(), nullable=False),
        sa.Column("lineno", sa.BigInteger(), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("basis", sa.String(16), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb"),
                  nullable=False),
        sa.UniqueConstraint("workload", "attempt", "path_key", name="uq_tail_positions_key"),
    )


def downgrade() -> None:
    op.drop_table("tail_positions")
