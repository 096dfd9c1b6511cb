"""Bringing a database's schema to the newest Alembic revision (``tickwork db upgrade``),
and telling whether a database's schema is one this code can use (``tickwork db wait``).

Migrations are additive (expand, then contract a release later), so a database one
release ahead of this code is still usable: during a rolling upgrade the new release's
migration runs first and the old release's pods keep working until they are replaced.
"""

from __future__ import annotations

import enum
import logging
import time
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from tickwork.shared.errors import StoreUnavailable
from tickwork.shared.store.dialects import dialect_of
from tickwork.shared.store.engine import create_store_engine, describe_store_error

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
MIGRATION_LOCK_KEY = 0x7469636B6D6967  # "tickmig": one migrator at a time on PostgreSQL


class SchemaState(enum.Enum):
    """Where a database's schema stands against this code's migrations."""

    EMPTY = "empty"  # never migrated
    BEHIND = "behind"  # at an older revision: `tickwork db upgrade` is due
    CURRENT = "current"
    AHEAD = "ahead"  # at a revision this code does not know: a newer release migrated it

    @property
    def usable(self) -> bool:
        """Whether services of this code may run on it."""
        return self in (SchemaState.CURRENT, SchemaState.AHEAD)


def _alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


DEADLOCK_RETRIES = 5
"""How many more times an upgrade that met a deadlock is tried (it rolled back whole)."""
DEADLOCK_SQLSTATE = "40P01"


def upgrade_database(engine: Engine, revision: str = "head") -> bool:
    """Apply every migration up to ``revision``; a no-op on an up-to-date database, and on
    one a newer release migrated (whose revision this code does not know). False then.

    The migrations run in one transaction while the previous release's processes keep
    working: one of their transactions can take the tables in another order and deadlock
    with it. PostgreSQL then rolls one of the two back; if it is the upgrade, it is
    tried again from the start, after a pause."""
    for retry in range(DEADLOCK_RETRIES + 1):
        try:
            return _upgrade(engine, revision)
        except DBAPIError as exc:
            if (
                getattr(exc.orig, "sqlstate", None) != DEADLOCK_SQLSTATE
                or retry == DEADLOCK_RETRIES
            ):
                raise
            log.warning("the upgrade met a deadlock with a running process; trying again")
            time.sleep(0.5 * (retry + 1))
    raise AssertionError("unreachable")


def _upgrade(engine: Engine, revision: str) -> bool:
    config = _alembic_config()
    with engine.begin() as connection:
        # Two migration jobs at once: the second waits, then finds nothing to do.
        dialect_of(connection).advisory_transaction_lock(connection, MIGRATION_LOCK_KEY)
        current = MigrationContext.configure(connection).get_current_revision()
        if current is not None and current not in _known_revisions():
            return False
        if current not in (None, head_revision()) and dialect_of(connection).serves_many_processes:
            # Every migration runs in this one transaction. One that alters `tasks` after an
            # earlier one took a weaker lock on it (a foreign key to it) would deadlock with
            # a running executor, which reads tasks and then writes them: take it first.
            connection.execute(text("LOCK TABLE tasks IN ACCESS EXCLUSIVE MODE"))
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
    return True


def _known_revisions() -> set[str]:
    scripts = ScriptDirectory.from_config(_alembic_config())
    return {script.revision for script in scripts.walk_revisions()}


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at, or None if it was never migrated."""
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def head_revision() -> str | None:
    """The newest revision this code knows."""
    return ScriptDirectory.from_config(_alembic_config()).get_current_head()


def schema_state(engine: Engine) -> SchemaState:
    """Where the database's schema stands against this code's migrations."""
    current = current_revision(engine)
    if current is None:
        return SchemaState.EMPTY
    if current == head_revision():
        return SchemaState.CURRENT
    return SchemaState.BEHIND if current in _known_revisions() else SchemaState.AHEAD


def is_up_to_date(engine: Engine) -> bool:
    """True when services of this code may use the database: its schema is at the newest
    revision this code knows, or at a newer one (a newer release migrated it)."""
    return schema_state(engine).usable


def open_migrated_store(database_url: str) -> Engine:
    """An engine on the database, migrated to the newest schema; StoreUnavailable if it
    cannot be reached or used (InvalidStoreUrl for a URL that is not one)."""
    engine = create_store_engine(database_url)
    try:
        upgrade_database(engine)
    except SQLAlchemyError as exc:
        engine.dispose()
        raise StoreUnavailable(describe_store_error(database_url, exc)) from exc
    return engine
