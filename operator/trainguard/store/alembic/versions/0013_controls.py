"""Cluster-wide controls a person sets at run time: the runtime pause of every action.

One row per control (``controls.name``), overwritten on change; each change is also written to the
audit log in the same transaction (``AuditStore.set_control``), so the history is kept there.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

ID_LEN = 255


def upgrade() -> None:
    op.create_table(
        "controls",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.JSON(), nullable=False),
        sa.Column("updated_by", sa.String(ID_LEN), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb"),
                  nullable=False),
    )


def downgrade() -> None:
    op.drop_table("controls")
