"""Fencing: the latest leadership claim per Lease, and the token each action intent was committed with.

Several operator replicas share one audit database and only the Lease holder may act. Each replica
that takes the Lease claims a new term here; an action intent carrying an older term is refused in
the same transaction that would commit it (``store/audit.py``), so a replica that lost its Lease
cannot start a scheduler mutation once the new leader has claimed.

Revision ID: 0003
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

ID_LEN = 255
FENCE_LEN = 600


def _ts(name: str) -> sa.Column[object]:
    kind = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
    return sa.Column(name, kind, nullable=False)


def upgrade() -> None:
    op.create_table(
        "leadership",
        sa.Column("lease", sa.String(ID_LEN), primary_key=True),
        sa.Column("holder", sa.String(ID_LEN), nullable=False),
        sa.Column("term", sa.Integer(), nullable=False),
        _ts("claimed_at"),
        _ts("last_fenced_at"),
    )
    # batch mode: SQLite cannot ALTER TABLE ... ADD COLUMN with every option; a nullable column is
    # added in place on PostgreSQL and MariaDB.
    with op.batch_alter_table("actions") as batch:
        batch.add_column(sa.Column("fence", sa.String(FENCE_LEN), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("actions") as batch:
        batch.drop_column("fence")
    op.drop_table("leadership")
