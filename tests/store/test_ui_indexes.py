"""Revision 0008 adds the indexes the web UI's pages read attempts by (the failures of the
last day, sessions filtered by their attempts' state) and takes them away on downgrade,
on SQLite and PostgreSQL alike."""

from __future__ import annotations

from alembic import command
from sqlalchemy import Engine, inspect

from tickwork.shared.store.engine import create_store_engine
from tickwork.shared.store.migrate import _alembic_config, current_revision, upgrade_database
from tickwork.shared.store.tables import attempts

UI_INDEXES = {
    "ix_attempts_state_finished_at": ["state", "finished_at"],
    "ix_attempts_state_session_id": ["state", "session_id"],
}


def _attempt_indexes(engine: Engine) -> dict[str, list[str]]:
    return {
        str(index["name"]): [str(column) for column in index["column_names"]]
        for index in inspect(engine).get_indexes("attempts")
    }


def _downgrade(engine: Engine, revision: str) -> None:
    config = _alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, revision)


def test_upgrade_adds_the_ui_indexes_as_the_tables_declare_them(database_url: str) -> None:
    engine = create_store_engine(database_url)
    try:
        upgrade_database(engine, "0007")
        assert not UI_INDEXES.keys() & _attempt_indexes(engine).keys()
        upgrade_database(engine, "0008")
        found = _attempt_indexes(engine)
        assert {name: found.get(name) for name in UI_INDEXES} == UI_INDEXES
        declared = {
            str(index.name): [column.name for column in index.columns]
            for index in attempts.indexes
            if index.name in UI_INDEXES
        }
        assert declared == UI_INDEXES
    finally:
        engine.dispose()


def test_downgrade_to_0007_removes_them_and_upgrade_adds_them_again(database_url: str) -> None:
    engine = create_store_engine(database_url)
    try:
        upgrade_database(engine, "0008")
        _downgrade(engine, "0007")
        assert current_revision(engine) == "0007"
        assert not UI_INDEXES.keys() & _attempt_indexes(engine).keys()
        upgrade_database(engine, "0008")
        assert UI_INDEXES.keys() <= _attempt_indexes(engine).keys()
    finally:
        engine.dispose()
