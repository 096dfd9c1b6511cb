"""api_tokens.projects: the project globs a token is limited to (null: every project)

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06 23:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("projects", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("projects")
