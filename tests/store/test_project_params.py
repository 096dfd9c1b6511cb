"""Persistent params in the store (param_set> / param_get>): one value per project and key,
set again replaces it, projects do not see each other's, a value older than Digdag's 90
days reads as missing, deleting a project keeps its values; revision 0009 adds the table
and takes it away on downgrade."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from alembic import command
from sqlalchemy import Engine, inspect

from tickwork.shared.store.engine import create_store_engine
from tickwork.shared.store.migrate import _alembic_config, current_revision, upgrade_database
from tickwork.shared.store.project_params import PARAM_TTL, get_project_params, set_project_params
from tickwork.shared.store.projects import delete_project, ensure_project
from tickwork.shared.store.tables import project_params

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def _projects(engine: Engine) -> tuple[int, int]:
    with engine.begin() as conn:
        return ensure_project(conn, "etl", NOW), ensure_project(conn, "reports", NOW)


class TestStore:
    def test_a_value_set_is_read_back_and_a_key_never_set_is_absent(self, engine: Engine) -> None:
        etl, _ = _projects(engine)
        with engine.begin() as conn:
            set_project_params(conn, etl, {"last_id": "42", "mode": "full"}, NOW)
        with engine.connect() as conn:
            found = get_project_params(conn, etl, ["last_id", "mode", "missing"], NOW)
        assert found == {"last_id": "42", "mode": "full"}

    def test_setting_a_key_again_replaces_its_value(self, engine: Engine) -> None:
        etl, _ = _projects(engine)
        with engine.begin() as conn:
            set_project_params(conn, etl, {"last_id": "42"}, NOW)
        with engine.begin() as conn:
            set_project_params(conn, etl, {"last_id": "43"}, NOW + timedelta(hours=1))
        with engine.connect() as conn:
            assert get_project_params(conn, etl, ["last_id"], NOW) == {"last_id": "43"}
            rows = conn.execute(project_params.select()).all()
        assert [(row.key, row.value) for row in rows] == [("last_id", "43")]

    def test_another_project_does_not_see_the_values(self, engine: Engine) -> None:
        etl, reports = _projects(engine)
        with engine.begin() as conn:
            set_project_params(conn, etl, {"last_id": "42"}, NOW)
            set_project_params(conn, reports, {"last_id": "7"}, NOW)
        with engine.connect() as conn:
            assert get_project_params(conn, etl, ["last_id"], NOW) == {"last_id": "42"}
            assert get_project_params(conn, reports, ["last_id"], NOW) == {"last_id": "7"}

    def test_a_value_not_set_within_90_days_reads_as_missing(self, engine: Engine) -> None:
        etl, _ = _projects(engine)
        with engine.begin() as conn:
            set_project_params(conn, etl, {"old": "a"}, NOW - PARAM_TTL - timedelta(seconds=1))
            set_project_params(conn, etl, {"recent": "b"}, NOW - timedelta(days=89))
        with engine.connect() as conn:
            assert get_project_params(conn, etl, ["old", "recent"], NOW) == {"recent": "b"}

    def test_deleting_the_project_keeps_its_values_as_digdag_does(self, engine: Engine) -> None:
        etl, _ = _projects(engine)
        with engine.begin() as conn:
            set_project_params(conn, etl, {"last_id": "42"}, NOW)
            delete_project(conn, "etl", NOW)
        with engine.begin() as conn:
            assert ensure_project(conn, "etl", NOW) == etl
            assert get_project_params(conn, etl, ["last_id"], NOW) == {"last_id": "42"}


def _downgrade(engine: Engine, revision: str) -> None:
    config = _alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, revision)


def test_revision_0009_adds_the_table_as_declared_and_downgrade_removes_it(
    database_url: str,
) -> None:
    engine = create_store_engine(database_url)
    try:
        upgrade_database(engine, "0008")
        assert not inspect(engine).has_table("project_params")
        upgrade_database(engine, "0009")
        columns = {c["name"] for c in inspect(engine).get_columns("project_params")}
        assert columns == {column.name for column in project_params.columns}
        primary_key = inspect(engine).get_pk_constraint("project_params")
        assert primary_key["constrained_columns"] == ["project_id", "key"]
        _downgrade(engine, "0008")
        assert current_revision(engine) == "0008"
        assert not inspect(engine).has_table("project_params")
    finally:
        engine.dispose()
