"""The store as routes see it: a read connection or a write transaction on the app's engine."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from flask import current_app, has_request_context
from sqlalchemy import Connection, Engine

from tickwork.services.api.audit import mark_recorded, pending_event
from tickwork.shared.store.audit import record
from tickwork.shared.store.dialects import dialect_of

ENGINE_KEY = "tickwork.engine"


def current_engine() -> Engine:
    """The engine of the app serving this request (``app.extensions``)."""
    engine: Engine = current_app.extensions[ENGINE_KEY]
    return engine


@contextmanager
def read_connection() -> Iterator[Connection]:
    """A connection for reads only (on SQLite it never waits for a writer).

    On PostgreSQL it runs in autocommit: at READ COMMITTED each statement takes its own
    snapshot inside a transaction too, so BEGIN and ROLLBACK would only cost round trips.
    """
    engine = current_engine()
    with dialect_of(engine).connect_for_reads(engine) as conn:
        yield conn


@contextmanager
def write_transaction() -> Iterator[Connection]:
    """A transaction, committed when the block ends and rolled back if it raises. In a
    request that is an audited change, the first such transaction also writes its audit
    row (services/api/audit.py), so the change and its row commit together."""
    with current_engine().begin() as conn:
        yield conn
        event = pending_event(conn) if has_request_context() else None
        if event is not None:
            record(conn, event)
    if event is not None:
        mark_recorded()
