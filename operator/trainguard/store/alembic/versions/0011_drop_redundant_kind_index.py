"""Drop ``ix_audit_log_kind``: ``ix_audit_log_kind_id`` (migration 0007) starts with the same column.

With both, PostgreSQL's planner may pick the one-column index for ``WHERE kind IN (...) ORDER BY id
DESC LIMIT n`` when the kind has few rows, then sort them: right for a few hundred rows, a full read
of the kind for a common one. With only ``(kind, id)`` every kind filter reads rows already in id
order, and every write to the log maintains one index fewer.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_audit_log_kind", table_name="audit_log")


def downgrade() -> None:
    op.create_index("ix_audit_log_kind", "audit_log", ["kind"])
