"""scheduler: policies, missed times, inactive spans, backfills

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30 12:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from tickwork.shared.store.dialects import dialect_of

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def _foreign_keys() -> bool:
    # SQLite cannot add a constraint to an existing table without rebuilding it.
    return dialect_of(op.get_bind()).alters_tables_in_place


def upgrade() -> None:
    op.create_table(
        "backfills",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column(
            "project_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column("workflow_name", sa.String(length=255), nullable=False),
        sa.Column("first_session_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_session_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("parallel", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], name=op.f("fk_backfills_project_id_projects")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_backfills")),
    )
    op.create_table(
        "schedule_inactive_spans",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column(
            "schedule_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reason", sa.String(length=16), nullable=False),
        sa.ForeignKeyConstraint(
            ["schedule_id"],
            ["schedules.id"],
            name=op.f("fk_schedule_inactive_spans_schedule_id_schedules"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_schedule_inactive_spans")),
    )
    op.create_index(
        "ix_schedule_inactive_spans_schedule",
        "schedule_inactive_spans",
        ["schedule_id", "ended_at"],
        unique=False,
    )
    op.create_table(
        "schedule_missed",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column(
            "schedule_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column("first_session_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_session_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("count", sa.Integer(), nullable=True),
        sa.Column("reason", sa.String(length=16), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["schedule_id"],
            ["schedules.id"],
            name=op.f("fk_schedule_missed_schedule_id_schedules"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_schedule_missed")),
    )
    op.create_index(
        "ix_schedule_missed_schedule_first",
        "schedule_missed",
        ["schedule_id", "first_session_time"],
        unique=False,
    )
    op.add_column(
        "attempts",
        sa.Column(
            "backfill_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True
        ),
    )
    if _foreign_keys():
        op.create_foreign_key(
            op.f("fk_attempts_backfill_id_backfills"),
            "attempts",
            "backfills",
            ["backfill_id"],
            ["id"],
        )
    op.add_column("schedules", sa.Column("paused_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column(
        "schedules", sa.Column("failures", sa.Integer(), server_default="0", nullable=False)
    )
    op.add_column("schedules", sa.Column("last_error", sa.Text(), nullable=True))
    op.create_index("ix_schedules_next_run_time", "schedules", ["next_run_time"], unique=False)
    op.add_column(
        "sessions",
        sa.Column(
            "schedule_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True
        ),
    )
    op.create_index(
        "ix_sessions_schedule_time", "sessions", ["schedule_id", "session_time"], unique=False
    )
    if _foreign_keys():
        op.create_foreign_key(
            op.f("fk_sessions_schedule_id_schedules"),
            "sessions",
            "schedules",
            ["schedule_id"],
            ["id"],
            ondelete="SET NULL",
        )


def downgrade() -> None:
    if _foreign_keys():
        op.drop_constraint(
            op.f("fk_sessions_schedule_id_schedules"), "sessions", type_="foreignkey"
        )
    op.drop_index("ix_sessions_schedule_time", table_name="sessions")
    op.drop_column("sessions", "schedule_id")
    op.drop_index("ix_schedules_next_run_time", table_name="schedules")
    op.drop_column("schedules", "last_error")
    op.drop_column("schedules", "failures")
    op.drop_column("schedules", "paused_at")
    if _foreign_keys():
        op.drop_constraint(
            op.f("fk_attempts_backfill_id_backfills"), "attempts", type_="foreignkey"
        )
    op.drop_column("attempts", "backfill_id")
    op.drop_index("ix_schedule_missed_schedule_first", table_name="schedule_missed")
    op.drop_table("schedule_missed")
    op.drop_index("ix_schedule_inactive_spans_schedule", table_name="schedule_inactive_spans")
    op.drop_table("schedule_inactive_spans")
    op.drop_table("backfills")
