"""task logs: when a run's result recorded its log (indexed from dispatch on)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02 06:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("task_logs") as batch:
        batch.add_column(sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True))
    # Every row before this revision was written with its run's result.
    op.execute(sa.text("UPDATE task_logs SET ended_at = created_at"))


def downgrade() -> None:
    with op.batch_alter_table("task_logs") as batch:
        batch.drop_column("ended_at")
