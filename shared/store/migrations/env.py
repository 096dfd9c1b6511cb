"""Alembic environment: runs migrations on the connection that tickwork.shared.store.migrate
hands over."""

from __future__ import annotations

from alembic import context

from tickwork.shared.store.dialects import dialect_of
from tickwork.shared.store.tables import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=not dialect_of(connection).alters_tables_in_place,
)
with context.begin_transaction():
    context.run_migrations()
