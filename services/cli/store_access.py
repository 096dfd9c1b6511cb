"""The operator's path of the admin commands: ``--database-url`` and a transaction on the
store; and how a database or Redis URL may be printed. The store and SQLAlchemy are
imported only when a command takes this path, so a command that asks the API instead
starts without them (the client commands import this module inside the function that
takes the path: see the import contract in pyproject.toml)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from services.cli.errors import fail

if TYPE_CHECKING:
    from sqlalchemy import Connection


@contextmanager
def store_transaction(database_url: str, *, write: bool = True) -> Iterator[Connection]:
    """A transaction on the store; store and user errors end the command with one line."""
    from sqlalchemy.exc import SQLAlchemyError

    from shared.errors import StoreUnavailable, TickworkError
    from shared.store.engine import describe_store_error
    from shared.store.migrate import open_migrated_store

    try:
        engine = open_migrated_store(database_url)
    except StoreUnavailable as exc:
        fail(f"error: {exc}", exc)
    try:
        with engine.begin() if write else engine.connect() as conn:
            yield conn
    except TickworkError as exc:
        fail(f"error: {exc}", exc)
    except SQLAlchemyError as exc:
        fail(f"error: {describe_store_error(database_url, exc)}", StoreUnavailable())
    finally:
        engine.dispose()


def printable_url(url: str) -> str:
    """A database or Redis URL as it may be printed: its password, if any, masked."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except ValueError:  # not a URL SQLAlchemy can parse: say nothing of it
        return "<unparsable URL>"
