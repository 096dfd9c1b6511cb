"""attempts.skip_tasks: the full names of the tasks an attempt counts as done without
running them (`tickwork run --end +TASK`, `--goal +TASK`)

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07 00:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("skip_tasks", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("skip_tasks")
