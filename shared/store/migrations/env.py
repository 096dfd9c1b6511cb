"""Alembic environment: runs migrations on the connection shared.store.migrate hands over."""

from __future__ import annotations

from alembic import context

from shared.store.tables import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
