"""Console indexes: audit search by kind or producer, newest first, without walking the whole log.

The API pages the audit log by id (``store/queries.py``: ``WHERE kind IN (...) ORDER BY id DESC
LIMIT n``). With only single-column indexes the planner walks the primary key backwards and filters,
which reads most of the table when the wanted kind is rare among recent rows: 200 ms on 1,000,000
rows in PostgreSQL (``benchmarks/api_console.py``). An index on ``(kind, id)`` (and ``(decided_by,
id)`` for the producer filter) gives those rows in id order directly: 0.1 ms.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_audit_log_kind_id", "audit_log", ["kind", "id"])
    op.create_index("ix_audit_log_decided_by_id", "audit_log", ["decided_by", "id"])


def downgrade() -> None:
    op.drop_index("ix_audit_log_decided_by_id", table_name="audit_log")
    op.drop_index("ix_audit_log_kind_id", table_name="audit_log")
