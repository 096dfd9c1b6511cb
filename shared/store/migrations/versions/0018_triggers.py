"""triggers: each workflow's `trigger:` (a run after another workflow's success, a
webhook), replaced on push; trigger_firings: what each fired and started, once per event

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-07 04:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "triggers",
        sa.Column("id", ID, nullable=False),
        sa.Column("project_id", ID, nullable=False),
        sa.Column("workflow_name", sa.String(255), nullable=False),
        sa.Column("key", sa.String(400), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("upstream_project", sa.String(128), nullable=True),
        sa.Column("upstream_workflow", sa.String(255), nullable=True),
        sa.Column("hook_name", sa.String(64), nullable=True),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("paused_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("fired_count", sa.Integer(), nullable=False),
        sa.Column("last_fired_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_attempt_id", ID, nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_triggers"),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], name="fk_triggers_project_id_projects"
        ),
        sa.UniqueConstraint(
            "project_id", "workflow_name", "key", name="uq_triggers_project_id_workflow_name_key"
        ),
    )
    # An attempt that succeeds finds the triggers waiting for its workflow.
    op.create_index("ix_triggers_upstream", "triggers", ["upstream_project", "upstream_workflow"])
    op.create_table(
        "trigger_firings",
        sa.Column("id", ID, nullable=False),
        sa.Column("trigger_id", ID, nullable=False),
        sa.Column("event_key", sa.String(200), nullable=False),
        sa.Column("attempt_id", ID, nullable=True),
        sa.Column("session_id", ID, nullable=True),
        sa.Column("fired_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_trigger_firings"),
        sa.UniqueConstraint("trigger_id", "event_key", name="uq_trigger_firings_event"),
    )


def downgrade() -> None:
    op.drop_table("trigger_firings")
    op.drop_index("ix_triggers_upstream", table_name="triggers")
    op.drop_table("triggers")
