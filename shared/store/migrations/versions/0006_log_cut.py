"""task logs: how many bytes the agent cut from the middle of a log

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 23:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("task_logs") as batch:
        batch.add_column(
            sa.Column("truncated_bytes", sa.BigInteger(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("task_logs") as batch:
        batch.drop_column("truncated_bytes")
