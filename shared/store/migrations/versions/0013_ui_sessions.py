"""ui_sessions: the web UI's signed-in sessions, so that signing out (or removing the
token) ends every copy of a session's cookie on every API replica

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-06 18:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ui_sessions",
        sa.Column("id_digest", sa.String(64), nullable=False),
        sa.Column("token_digest", sa.String(64), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id_digest", name="pk_ui_sessions"),
    )
    # Ending every session of one token is one UPDATE through this index.
    op.create_index("ix_ui_sessions_token_digest", "ui_sessions", ["token_digest"])
    op.create_index("ix_ui_sessions_last_seen_at", "ui_sessions", ["last_seen_at"])


def downgrade() -> None:
    op.drop_index("ix_ui_sessions_last_seen_at", table_name="ui_sessions")
    op.drop_index("ix_ui_sessions_token_digest", table_name="ui_sessions")
    op.drop_table("ui_sessions")
