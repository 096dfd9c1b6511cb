"""tasks: an index for the reaper's in-flight tasks unchanged since a time

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02 10:00:00
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # QUEUED/RUNNING tasks unchanged since the reaper's grace, oldest first: read from the
    # old end of the index, so a deep queue of fresh tasks costs the reaper nothing.
    op.create_index("ix_tasks_state_updated_at", "tasks", ["state", "updated_at"])


def downgrade() -> None:
    op.drop_index("ix_tasks_state_updated_at", table_name="tasks")
