"""the REST API: pushed project archives, attempt idempotency keys, retry from a task

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 17:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "project_archives",
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("content", sa.LargeBinary(), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("digest", name="pk_project_archives"),
    )
    with op.batch_alter_table("revisions") as batch:
        batch.add_column(sa.Column("archive_digest", sa.String(64), nullable=True))
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("idempotency_key", sa.String(255), nullable=True))
        batch.add_column(sa.Column("resume_only", sa.JSON(), nullable=True))
        batch.create_unique_constraint("uq_attempts_idempotency_key", ["idempotency_key"])
    op.create_index("ix_attempts_session_id", "attempts", ["session_id", "id"])
    op.create_index(
        "ix_sessions_project_workflow_id", "sessions", ["project_id", "workflow_name", "id"]
    )
    op.create_index("ix_sessions_session_time", "sessions", ["session_time"])


def downgrade() -> None:
    op.drop_index("ix_sessions_session_time", table_name="sessions")
    op.drop_index("ix_sessions_project_workflow_id", table_name="sessions")
    op.drop_index("ix_attempts_session_id", table_name="attempts")
    with op.batch_alter_table("attempts") as batch:
        batch.drop_constraint("uq_attempts_idempotency_key", type_="unique")
        batch.drop_column("resume_only")
        batch.drop_column("idempotency_key")
    with op.batch_alter_table("revisions") as batch:
        batch.drop_column("archive_digest")
    op.drop_table("project_archives")
