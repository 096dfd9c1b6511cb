"""attempts: indexes for retention's deletes (the attempts a resume or a definition names)

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06 16:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

RESUMED = sa.text("resume_from_attempt_id IS NOT NULL")


def upgrade() -> None:
    # Deleting an attempt or a workflow definition makes the database look for the
    # attempts that still name it (the foreign keys): without these, each deleted row
    # would read the whole attempts table.
    op.create_index(
        "ix_attempts_resume_from_attempt_id",
        "attempts",
        ["resume_from_attempt_id"],
        postgresql_where=RESUMED,
        sqlite_where=RESUMED,
    )
    op.create_index("ix_attempts_workflow_definition_id", "attempts", ["workflow_definition_id"])


def downgrade() -> None:
    op.drop_index("ix_attempts_workflow_definition_id", table_name="attempts")
    op.drop_index("ix_attempts_resume_from_attempt_id", table_name="attempts")
