"""Creating database engines for SQLite (embedded) and PostgreSQL (psycopg 3)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.pool import ConnectionPoolEntry

from shared.errors import InvalidStoreUrl

READ_ONLY_OPTION = "tickwork_read_only"


def describe_store_error(url: str, error: SQLAlchemyError) -> str:
    """One line on why a database could not be used, without the URL's password."""
    safe_url = make_url(url).render_as_string(hide_password=True)
    reason = " ".join(str(getattr(error, "orig", None) or error).split())
    return f"cannot use database {safe_url}: {reason[:300]}"


def _json_dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=False)


def create_store_engine(url: str, *, pool_size: int = 5) -> Engine:
    """An engine for ``url``; SQLite gets WAL, foreign keys and a busy timeout.

    ``postgresql://`` URLs are read as ``postgresql+psycopg://`` so psycopg 3 is always used.
    Raises InvalidStoreUrl (a StoreUnavailable) for a URL that is malformed or names another
    kind of database.
    """
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise InvalidStoreUrl(f"cannot read database URL {url!r}") from None
    if parsed.get_backend_name() not in ("sqlite", "postgresql", "postgres"):
        raise InvalidStoreUrl(
            f"unsupported database {parsed.get_backend_name()!r}: use sqlite:/// or postgresql://"
        )
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() == "sqlite":
        engine = create_engine(
            parsed,
            json_serializer=_json_dumps,
            connect_args={"check_same_thread": False, "timeout": 30},
        )
        event.listen(engine, "connect", _configure_sqlite)
        event.listen(engine, "begin", _begin_immediate)
        return engine
    return create_engine(
        parsed,
        json_serializer=_json_dumps,
        pool_size=pool_size,
        pool_pre_ping=True,
        connect_args={"connect_timeout": 10},  # an unreachable server fails, not hangs
    )


def _configure_sqlite(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
    # Let SQLAlchemy, not the sqlite3 module, decide when transactions begin.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA cache_size=-65536")  # 64 MiB: the task table stays in memory
    cursor.execute("PRAGMA temp_store=MEMORY")
    cursor.close()


def _begin_immediate(connection: Connection) -> None:
    # Writers take the write lock at BEGIN, so two of them queue on busy_timeout instead of
    # failing with "database is locked" when a read transaction tries to upgrade. Readers
    # (see read_only) need no lock at all in WAL mode.
    if connection.get_execution_options().get(READ_ONLY_OPTION):
        connection.exec_driver_sql("BEGIN")
    else:
        connection.exec_driver_sql("BEGIN IMMEDIATE")


@contextmanager
def read_only(engine: Engine) -> Iterator[Connection]:
    """A connection for reads only: on SQLite it never waits for (or blocks) a writer."""
    with engine.connect() as conn:
        yield conn.execution_options(**{READ_ONLY_OPTION: True})


WORK_CHANNEL = "tickwork_work"
"""The PostgreSQL NOTIFY channel that wakes executors: new attempts, kills."""


def notify_work(conn: Connection) -> None:
    """Wake the executors when this transaction commits (PostgreSQL; nothing on SQLite,
    whose embedded executor polls)."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_notify(:channel, '')"), {"channel": WORK_CHANNEL})


def libpq_url(url: str) -> str:
    """A ``postgresql+psycopg://...`` SQLAlchemy URL as the ``postgresql://...`` URI that
    psycopg (libpq) itself accepts."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
