"""Creating database engines for SQLite (embedded) and PostgreSQL (psycopg 3)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pydantic_core import from_json
from sqlalchemy import Connection, Engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from tickwork.shared.errors import InvalidStoreUrl
from tickwork.shared.store.dialects import READ_ONLY_OPTION, dialect_named, dialect_of
from tickwork.shared.store.urls import multi_host_url, printable_url

__all__ = [
    "READ_ONLY_OPTION",
    "WORK_CHANNEL",
    "create_store_engine",
    "describe_store_error",
    "libpq_url",
    "notify_work",
    "read_only",
]


def describe_store_error(url: str, error: SQLAlchemyError) -> str:
    """One line on why a database could not be used, without the URL's password."""
    safe_url = printable_url(url)
    reason = " ".join(str(getattr(error, "orig", None) or error).split())
    return f"cannot use database {safe_url}: {reason[:300]}"


def _json_dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=False)


def _json_loads(text: str | bytes) -> Any:
    """A JSON column's text as Python values, as ``json.loads`` reads it.

    pydantic-core's parser gives the same values (big integers, floats to the last bit,
    the last of duplicate keys) in a fraction of the time a page of rows spends in
    ``json.loads``; the text it refuses (a lone UTF-16 surrogate, which ``json`` columns
    keep and ``json.loads`` accepts) is left to ``json.loads``.
    """
    try:
        return from_json(text)
    except ValueError:
        return json.loads(text)


def create_store_engine(url: str, *, pool_size: int = 5, max_overflow: int = 10) -> Engine:
    """An engine for ``url``; SQLite gets WAL, foreign keys and a busy timeout.

    A PostgreSQL pool keeps ``pool_size`` connections once opened, and opens up to
    ``max_overflow`` more while that many are in use, closing each when it comes back.

    ``postgresql://`` URLs are read as ``postgresql+psycopg://`` so psycopg 3 is always used.
    Raises InvalidStoreUrl (a StoreUnavailable) for a URL that is malformed or names another
    kind of database.
    """
    try:
        parsed = make_url(multi_host_url(url))
    except (ArgumentError, ValueError):
        raise InvalidStoreUrl(f"cannot read database URL {url!r}") from None
    if parsed.get_backend_name() not in ("sqlite", "postgresql", "postgres"):
        raise InvalidStoreUrl(
            f"unsupported database {parsed.get_backend_name()!r}: use sqlite:/// or postgresql://"
        )
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    dialect = dialect_named(parsed.get_backend_name())
    return dialect.create_engine(
        parsed,
        pool_size=pool_size,
        max_overflow=max_overflow,
        json_serializer=_json_dumps,
        json_deserializer=_json_loads,
    )


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
    dialect_of(conn).notify(conn, WORK_CHANNEL)


def libpq_url(url: str) -> str:
    """A ``postgresql+psycopg://...`` SQLAlchemy URL as the ``postgresql://...`` URI that
    psycopg (libpq) itself accepts."""
    parsed = make_url(multi_host_url(url))
    return parsed.set(drivername="postgresql").render_as_string(hide_password=False)
