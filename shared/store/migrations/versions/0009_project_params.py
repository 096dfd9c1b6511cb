"""project_params: the persistent params param_set> stores and param_get> reads

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02 07:15:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "project_params",
        sa.Column("project_id", Id, nullable=False),
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], name="fk_project_params_project_id_projects"
        ),
        sa.PrimaryKeyConstraint("project_id", "key", name="pk_project_params"),
    )


def downgrade() -> None:
    op.drop_table("project_params")
