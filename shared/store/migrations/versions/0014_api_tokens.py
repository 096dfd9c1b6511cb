"""api_tokens: named, revocable bearer tokens kept in the store (their SHA-256 only)

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06 21:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("created_by", sa.String(80), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("name", name="pk_api_tokens"),
    )
    # Each request with a store token is one read through this index.
    op.create_index("ix_api_tokens_digest", "api_tokens", ["digest"], unique=True)


def downgrade() -> None:
    op.drop_index("ix_api_tokens_digest", table_name="api_tokens")
    op.drop_table("api_tokens")
