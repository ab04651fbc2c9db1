"""Indexes of the HTTP API's lists: the workloads table sorted by last or first seen (keyset
pages of ``(time, id)``), filtered by state, and our node actions by operation.

Revision ID: 0006
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_workloads_last_seen_id", "workloads", ["last_seen", "id"])
    op.create_index("ix_workloads_first_seen_id", "workloads", ["first_seen", "id"])
    op.create_index("ix_workloads_state", "workloads", ["state"])
    op.create_index("ix_actions_operation", "actions", ["operation"])


def downgrade() -> None:
    op.drop_index("ix_actions_operation", table_name="actions")
    op.drop_index("ix_workloads_state", table_name="workloads")
    op.drop_index("ix_workloads_first_seen_id", table_name="workloads")
    op.drop_index("ix_workloads_last_seen_id", table_name="workloads")
