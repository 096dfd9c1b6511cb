"""``tickwork db prune``: what it prints per table, its dry run, and its refusals."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine

from tests.support.history_seed import DAY, add_project, add_revision, add_run, count_rows
from tickwork.services.compose.commands import main
from tickwork.shared.clock import utc_now


@pytest.fixture
def seeded(engine: Engine) -> Engine:
    """Four sessions 40 days old and one of today."""
    now = utc_now()
    with engine.begin() as conn:
        project_id = add_project(conn, "etl")
        definition_id = add_revision(conn, project_id, "r1")
        for i in range(4):
            add_run(conn, project_id, definition_id, now - (40 + i) * DAY)
        add_run(conn, project_id, definition_id, now - DAY / 2)
    return engine


def prune(url: str, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["db", "prune", "--database-url", url, *args])
    return result.exit_code, result.stdout, result.stderr


def test_it_prints_the_rows_it_removed_per_table(
    seeded: Engine, migrated_database_url: str
) -> None:
    code, out, _err = prune(migrated_database_url, "--older-than", "30d")
    assert code == 0
    lines = {line.split()[0]: line.split()[-1] for line in out.splitlines()[1:-1]}
    assert out.splitlines()[0] == "removed:"
    assert lines["sessions"] == "4"
    assert lines["tasks"] == "12"
    assert lines["task_log_chunks"] == "16"
    assert out.splitlines()[-1] == "total: 52 rows"
    with seeded.connect() as conn:
        assert count_rows(conn)["sessions"] == 1


def test_a_dry_run_prints_the_same_counts_and_changes_nothing(
    seeded: Engine, migrated_database_url: str
) -> None:
    with seeded.connect() as conn:
        before = count_rows(conn)
    code, out, _err = prune(migrated_database_url, "--older-than", "30d", "--dry-run")
    assert code == 0
    assert out.splitlines()[0] == "would remove:"
    assert out.splitlines()[-1] == "total: 52 rows (dry run: nothing changed)"
    with seeded.connect() as conn:
        assert count_rows(conn) == before


def test_one_project_alone(seeded: Engine, migrated_database_url: str) -> None:
    code, out, _err = prune(migrated_database_url, "--project", "etl", "--older-than", "30")
    assert code == 0
    assert "total: 52 rows" in out


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--older-than", "banana"], "--older-than"),
        (["--project", "nope"], "--project"),
    ],
)
def test_a_bad_argument_exits_2_with_one_line_naming_it(
    seeded: Engine, migrated_database_url: str, args: list[str], named: str
) -> None:
    code, _out, err = prune(migrated_database_url, *args)
    assert code == 2
    assert err.count("\n") == 1
    assert err.startswith(f"error: {named}: ")
    assert "Traceback" not in err


def test_a_bad_retention_variable_exits_2_naming_it(
    seeded: Engine, migrated_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TICKWORK_KEEP_REVISIONS", "lots")
    code, _out, err = prune(migrated_database_url)
    assert code == 2
    assert "TICKWORK_KEEP_REVISIONS" in err
