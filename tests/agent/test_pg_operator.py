"""``pg>`` against the real local PostgreSQL, in a throwaway database for this module: the
query from a template file, create_table, insert_into, download_file, store_last_results,
the server's message on failure, and strict_transaction keeping a re-run from inserting
twice, as Digdag's pg> does."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url

from tests.support.servers import libpq_conninfo, throwaway_postgres_database
from tests.support.waiting import wait_until
from tickwork.services.agent.operators.base import (
    OperatorContext,
    OperatorFailed,
    RunControl,
    StopReason,
)
from tickwork.services.agent.operators.pg import connection_settings, run_pg
from tickwork.shared.dispatch.messages import TaskMessage


@pytest.fixture(scope="module")
def database(postgres_server_url: str) -> Iterator[str]:
    """The libpq URL of a throwaway database with a table ``users`` of three rows."""
    with throwaway_postgres_database(postgres_server_url) as url:
        conninfo = libpq_conninfo(url)
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute("CREATE TABLE users (id int, name text, note text)")
            conn.execute(
                "INSERT INTO users VALUES (1, 'ann', 'a, \"quoted\"'), (2, 'bob', ''),"
                " (3, 'cy', NULL)"
            )
        yield conninfo


def connection_params(conninfo: str) -> dict[str, Any]:
    """The pg> params that reach ``conninfo``'s database."""
    url = make_url(conninfo.replace("postgresql://", "postgresql+psycopg://", 1))
    return {
        "host": url.host,
        "port": url.port or 5432,
        "user": url.username,
        "database": url.database,
    }


def run(
    tmp_path: Path,
    database: str,
    query: str,
    params: dict[str, Any] | None = None,
    task_id: int = 1,
    secrets: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run pg> on ``query`` (written to query.sql) with the connection of ``database``."""
    (tmp_path / "query.sql").write_text(query)
    given = connection_params(database) | (params or {})
    message = TaskMessage(task_id, 7, 1, "+wf+pg", "pg", "query.sql", given, str(tmp_path))
    with (tmp_path / "task.log").open("a") as log_file:
        context = OperatorContext(message, log_file, tmp_path / "task.log", secrets=secrets or {})
        return run_pg(context)


def rows(database: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(database) as conn:
        return conn.execute(query.encode()).fetchall()


def test_store_last_results_first_stores_the_first_row(tmp_path: Path, database: str) -> None:
    stored = run(
        tmp_path,
        database,
        "SELECT id, name FROM users WHERE id >= ${min_id} ORDER BY id",
        {"store_last_results": "first", "min_id": 2},
    )
    assert stored == {"pg": {"last_results": {"id": 2, "name": "bob"}}}


def test_store_last_results_all_stores_every_row(tmp_path: Path, database: str) -> None:
    stored = run(
        tmp_path, database, "SELECT id, name FROM users ORDER BY id", {"store_last_results": "all"}
    )
    assert stored["pg"]["last_results"] == [
        {"id": 1, "name": "ann"},
        {"id": 2, "name": "bob"},
        {"id": 3, "name": "cy"},
    ]


def test_a_store_last_results_query_runs_read_only(tmp_path: Path, database: str) -> None:
    with pytest.raises(OperatorFailed, match="must be read-only when store_last_results"):
        run(
            tmp_path,
            database,
            "INSERT INTO users VALUES (9, 'zed', NULL) RETURNING id",
            {"store_last_results": "first"},
        )
    assert rows(database, "SELECT count(*) FROM users WHERE id = 9") == [(0,)]


def test_create_table_replaces_the_table_with_the_query_result(
    tmp_path: Path, database: str
) -> None:
    query = "SELECT id FROM users WHERE id <= ${top}"
    run(tmp_path, database, query, {"create_table": "small_users", "top": 2}, task_id=10)
    run(tmp_path, database, query, {"create_table": "small_users", "top": 1}, task_id=11)
    assert rows(database, "SELECT id FROM small_users") == [(1,)]


def test_insert_into_appends_the_query_rows(tmp_path: Path, database: str) -> None:
    run(tmp_path, database, "CREATE TABLE names (name text)", task_id=20)
    run(tmp_path, database, "SELECT name FROM users", {"insert_into": "names"}, task_id=21)
    assert sorted(rows(database, "SELECT name FROM names")) == [("ann",), ("bob",), ("cy",)]


def test_download_file_writes_the_rows_as_csv_in_the_task_directory(
    tmp_path: Path, database: str
) -> None:
    run(tmp_path, database, "SELECT * FROM users ORDER BY id", {"download_file": "out/users.csv"})
    assert (tmp_path / "out" / "users.csv").read_bytes() == (
        b'id,name,note\r\n1,ann,"a, ""quoted"""\r\n2,bob,""\r\n3,cy,\r\n'
    )


def test_download_file_outside_the_task_directory_is_refused(tmp_path: Path, database: str) -> None:
    task_dir = tmp_path / "task"
    task_dir.mkdir()
    with pytest.raises(OperatorFailed, match="outside the task's directory"):
        run(task_dir, database, "SELECT 1", {"download_file": "../escaped.csv"})
    assert not (tmp_path / "escaped.csv").exists()


def test_a_syntax_error_fails_the_task_with_the_server_message(
    tmp_path: Path, database: str
) -> None:
    with pytest.raises(OperatorFailed, match='syntax error at or near "SELEC"'):
        run(tmp_path, database, "SELEC 1", task_id=30)


def test_a_failed_script_changes_nothing(tmp_path: Path, database: str) -> None:
    run(tmp_path, database, "CREATE TABLE kept (n int)", task_id=40)
    with pytest.raises(OperatorFailed, match="division by zero"):
        run(tmp_path, database, "INSERT INTO kept VALUES (1); SELECT 1/0;", task_id=41)
    assert rows(database, "SELECT count(*) FROM kept") == [(0,)]


def test_a_rerun_of_the_same_task_does_not_insert_twice(tmp_path: Path, database: str) -> None:
    # Given an insert that committed, but whose task runs again (its agent died before
    # reporting): the same attempt and task
    run(tmp_path, database, "CREATE TABLE once (n int)", task_id=50)
    run(tmp_path, database, "SELECT 1", {"insert_into": "once"}, task_id=51)
    run(tmp_path, database, "SELECT 1", {"insert_into": "once"}, task_id=51)
    # Then the status table kept the second run from applying it again
    assert rows(database, "SELECT count(*) FROM once") == [(1,)]
    assert rows(database, "SELECT count(*) FROM __tickwork_status WHERE completed_at IS NOT NULL")
    assert "already applied" in (tmp_path / "task.log").read_text()


def test_without_strict_transaction_a_rerun_inserts_again(tmp_path: Path, database: str) -> None:
    run(tmp_path, database, "CREATE TABLE twice (n int)", task_id=60)
    loose = {"insert_into": "twice", "strict_transaction": False}
    run(tmp_path, database, "SELECT 1", loose, task_id=61)
    run(tmp_path, database, "SELECT 1", loose, task_id=61)
    assert rows(database, "SELECT count(*) FROM twice") == [(2,)]


def test_a_failed_insert_is_applied_by_the_retry(tmp_path: Path, database: str) -> None:
    run(tmp_path, database, "CREATE TABLE retried (n int)", task_id=70)
    with pytest.raises(OperatorFailed, match="does not exist"):
        run(tmp_path, database, "SELECT n FROM not_yet", {"insert_into": "retried"}, task_id=71)
    run(tmp_path, database, "CREATE TABLE not_yet AS SELECT 5 AS n", task_id=72)
    run(tmp_path, database, "SELECT n FROM not_yet", {"insert_into": "retried"}, task_id=71)
    assert rows(database, "SELECT n FROM retried") == [(5,)]


def test_the_pg_mapping_of_params_gives_the_connection(tmp_path: Path, database: str) -> None:
    (tmp_path / "query.sql").write_text("SELECT 41 + 1 AS answer")
    params = {"pg": connection_params(database), "store_last_results": "first"}
    message = TaskMessage(1, 7, 1, "+wf+pg", "pg", "query.sql", params, str(tmp_path))
    with (tmp_path / "task.log").open("w") as log_file:
        stored = run_pg(OperatorContext(message, log_file, tmp_path / "task.log"))
    assert stored == {"pg": {"last_results": {"answer": 42}}}


def test_secrets_win_over_params_for_the_connection() -> None:
    secrets = {"pg.password": "s3cret", "pg.user": "from_secret"}
    params = {"host": "db.test", "user": "from_param", "database": "app", "password": "plain"}
    settings = connection_settings(params, secrets)
    assert settings["password"] == "s3cret"
    assert settings["user"] == "from_secret"
    assert (settings["host"], settings["port"], settings["dbname"]) == ("db.test", 5432, "app")


def test_password_override_takes_the_password_from_the_secret_it_names() -> None:
    secrets = {"pg.password": "default", "pg.reporting": "r3port"}
    params = {"user": "u", "database": "app", "password_override": "reporting"}
    assert connection_settings(params, secrets)["password"] == "r3port"
    with pytest.raises(OperatorFailed, match=r"password_override: the secret pg\.missing"):
        connection_settings({**params, "password_override": "missing"}, secrets)


def test_socket_timeout_cancels_a_statement_that_runs_longer(tmp_path: Path, database: str) -> None:
    with pytest.raises(OperatorFailed, match="statement timeout"):
        run(tmp_path, database, "SELECT pg_sleep(5)", {"socket_timeout": "1s"})
    settings = connection_settings({"user": "u", "database": "d", "socket_timeout": 90}, {})
    assert settings["tcp_user_timeout"] == 90_000
    assert "-c statement_timeout=90000" in settings["options"]


def test_a_connection_failure_names_the_server(tmp_path: Path, database: str) -> None:
    with pytest.raises(OperatorFailed, match=r"could not connect to .*no_such_database"):
        run(tmp_path, database, "SELECT 1", {"database": "no_such_database"})


def test_stopping_the_run_cancels_the_query_on_the_server(tmp_path: Path, database: str) -> None:
    (tmp_path / "query.sql").write_text("SELECT pg_sleep(30)")
    params = connection_params(database) | {"store_last_results": "first"}
    message = TaskMessage(90, 7, 1, "+wf+pg", "pg", "query.sql", params, str(tmp_path))
    control = RunControl()
    failures: list[str] = []

    def target() -> None:
        with (tmp_path / "task.log").open("w") as log_file:
            try:
                run_pg(OperatorContext(message, log_file, tmp_path / "task.log", control=control))
            except OperatorFailed as exc:
                failures.append(str(exc))

    runner = threading.Thread(target=target)
    started = time.monotonic()
    runner.start()
    wait_until("the query runs on the server", lambda: sleeping_queries(database) == 1, 10)
    assert control.stop(StopReason.KILLED)
    runner.join(timeout=10)
    assert not runner.is_alive() and time.monotonic() - started < 15
    assert failures and "canceling statement due to user request" in failures[0]


def sleeping_queries(database: str) -> int:
    found = rows(
        database,
        "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(30)'"
        " AND pid <> pg_backend_pid()",
    )
    return int(found[0][0])


def test_a_plain_select_leaves_nothing_behind(postgres_server_url: str, tmp_path: Path) -> None:
    with throwaway_postgres_database(postgres_server_url) as url:
        conninfo = libpq_conninfo(url)
        run(tmp_path, conninfo, "SELECT 1; SELECT 2")
        tables = "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
        assert rows(conninfo, tables) == [(0,)]
        run(tmp_path, conninfo, "CREATE TABLE made (n int); INSERT INTO made VALUES (1)")
        assert rows(conninfo, "SELECT n FROM made") == [(1,)]
        assert rows(conninfo, tables) == [(2,)]  # made, and the status table
