"""pools: named numbers of slots shared by every project (`tickwork pools set`); tasks
gain the pool they wait for (`_pool`), their priority (`_priority`) and the rank by which
the executor hands out ready tasks (ready time less the priority's head start)

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-07 05:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pools",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("slots", sa.Integer(), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_pools"),
    )
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("pool", sa.String(64), nullable=True))
        batch.add_column(sa.Column("priority", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("ready_rank", sa.Float(), nullable=True))
    # Tasks ready before this revision are handed out first, in id order.
    op.execute("UPDATE tasks SET ready_rank = 0 WHERE state = 'ready'")
    # Ready tasks in rank order (of a pool, or of none); a pool's tasks in flight.
    op.create_index("ix_tasks_state_pool_rank", "tasks", ["state", "pool", "ready_rank"])


def downgrade() -> None:
    op.drop_index("ix_tasks_state_pool_rank", table_name="tasks")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("ready_rank")
        batch.drop_column("priority")
        batch.drop_column("pool")
    op.drop_table("pools")
