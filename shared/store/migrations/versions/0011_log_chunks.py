"""task logs in the store: the chunks of each run's log, compressed, keyed by offset;
when retention removed a log's text

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-06 15:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from tickwork.shared.store.dialects import dialect_of

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "task_log_chunks",
        sa.Column(
            "task_id",
            Id,
            sa.ForeignKey("tasks.id", ondelete="CASCADE", name="fk_task_log_chunks_task_id_tasks"),
            nullable=False,
        ),
        sa.Column("lease_token", sa.BigInteger(), nullable=False),
        sa.Column("byte_offset", sa.BigInteger(), nullable=False),
        sa.Column("size_bytes", sa.Integer(), nullable=False),
        sa.Column("compressed", sa.Boolean(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("task_id", "lease_token", "byte_offset", name="pk_task_log_chunks"),
    )
    if dialect_of(op.get_bind()).compresses_large_values:
        # Chunks are compressed already (zlib): PostgreSQL's own TOAST compression would
        # spend CPU on every write for nothing.
        op.execute("ALTER TABLE task_log_chunks ALTER COLUMN data SET STORAGE EXTERNAL")
    with op.batch_alter_table("task_logs") as batch:
        batch.add_column(sa.Column("pruned_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("task_logs") as batch:
        batch.drop_column("pruned_at")
    op.drop_table("task_log_chunks")
