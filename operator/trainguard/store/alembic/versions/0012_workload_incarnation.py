"""Workload incarnations: which object a workload id names (a Kubernetes object's uid).

A JobSet or PyTorchJob deleted and created again under the same name has the same workload id;
without this the newcomer resumed its predecessor's history (retries used, attempts already
advised, read positions). With it, the store moves the predecessor's rows to a retired id the
first time it sees the new object (``AuditStore.retire_incarnation``).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workloads") as batch:
        batch.add_column(sa.Column("incarnation", sa.String(128), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("workloads") as batch:
        batch.drop_column("incarnation")
