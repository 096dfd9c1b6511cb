"""the full workflow language: project secrets, SLA deadlines and alerts

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 18:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "secrets",
        sa.Column("id", Id, autoincrement=True, nullable=False),
        sa.Column("project_id", Id, nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("value_encrypted", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], name="fk_secrets_project_id_projects"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_secrets"),
        sa.UniqueConstraint("project_id", "name", name="uq_secrets_project_id_name"),
    )
    op.create_table(
        "alerts",
        sa.Column("id", Id, autoincrement=True, nullable=False),
        sa.Column("attempt_id", Id, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["attempt_id"], ["attempts.id"], name="fk_alerts_attempt_id_attempts"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_alerts"),
        sa.UniqueConstraint("attempt_id", "kind", name="uq_alerts_attempt_id_kind"),
    )
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("sla_deadline", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("sla_fired_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index("ix_attempts_sla_deadline", "attempts", ["sla_deadline"])


def downgrade() -> None:
    op.drop_index("ix_attempts_sla_deadline", table_name="attempts")
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("sla_fired_at")
        batch.drop_column("sla_deadline")
    op.drop_table("alerts")
    op.drop_table("secrets")
