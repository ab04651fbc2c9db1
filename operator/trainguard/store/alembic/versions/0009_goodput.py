"""Goodput accounting: when each attempt last wrote a checkpoint.

``attempts.checkpoint_saved`` says whether an attempt saved any checkpoint; goodput accounting
(``trainguard goodput``) also needs *when* it saved the last one, because the work done between
that checkpoint and the failure is what a restart has to do again. Nullable: rows written before
this revision, and attempts without a checkpoint line, have none.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    kind = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("last_checkpoint_at", kind, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("last_checkpoint_at")
