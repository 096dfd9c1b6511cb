"""notification_rules: each project's rules, from its notifications.yml (replaced on push);
notification_deliveries: one row per rule and event, sent at least once by one executor

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07 03:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "notification_rules",
        sa.Column("id", ID, nullable=False),
        sa.Column("project_id", ID, nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_notification_rules"),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], name="fk_notification_rules_project_id_projects"
        ),
        sa.UniqueConstraint("project_id", "name", name="uq_notification_rules_project_id_name"),
    )
    op.create_table(
        "notification_deliveries",
        sa.Column("id", ID, nullable=False),
        sa.Column("project_id", ID, nullable=False),
        sa.Column("rule_name", sa.String(64), nullable=False),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("event_key", sa.String(128), nullable=False),
        sa.Column("workflow_name", sa.String(255), nullable=True),
        sa.Column("attempt_id", ID, nullable=True),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("target", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("tries", sa.Integer(), nullable=False),
        sa.Column("next_try_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("claimed_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_status", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("possible_duplicate", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("sent_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_notification_deliveries"),
        sa.UniqueConstraint(
            "project_id", "rule_name", "event_key", name="uq_notification_deliveries_event"
        ),
    )
    # The sender's pass reads the due ones; lists read a project's newest first.
    op.create_index(
        "ix_notification_deliveries_state_next", "notification_deliveries", ["state", "next_try_at"]
    )
    op.create_index(
        "ix_notification_deliveries_project_id", "notification_deliveries", ["project_id", "id"]
    )


def downgrade() -> None:
    op.drop_index("ix_notification_deliveries_project_id", table_name="notification_deliveries")
    op.drop_index("ix_notification_deliveries_state_next", table_name="notification_deliveries")
    op.drop_table("notification_deliveries")
    op.drop_table("notification_rules")
