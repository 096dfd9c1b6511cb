"""attempts: indexes for the web UI's failures of the last day and sessions by state

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02 07:00:00
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Attempts that ended in a state since a time, newest first (the overview's failures).
    op.create_index("ix_attempts_state_finished_at", "attempts", ["state", "finished_at"])
    # Attempts in a state by session, newest session first (sessions filtered by state).
    op.create_index("ix_attempts_state_session_id", "attempts", ["state", "session_id"])


def downgrade() -> None:
    op.drop_index("ix_attempts_state_session_id", table_name="attempts")
    op.drop_index("ix_attempts_state_finished_at", table_name="attempts")
