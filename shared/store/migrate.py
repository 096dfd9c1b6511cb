"""Bringing a database's schema to the newest Alembic revision (``tickwork db upgrade``)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def _alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


def upgrade_database(engine: Engine, revision: str = "head") -> None:
    """Apply every migration up to ``revision``; a no-op on an up-to-date database."""
    config = _alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at, or None if it was never migrated."""
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def head_revision() -> str | None:
    """The newest revision this code knows."""
    return ScriptDirectory.from_config(_alembic_config()).get_current_head()


def is_up_to_date(engine: Engine) -> bool:
    """True when the database is at the newest revision."""
    return current_revision(engine) == head_revision()
