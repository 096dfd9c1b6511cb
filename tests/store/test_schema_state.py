"""Whether a database's schema is one this code can use, as `tickwork db check` and
`tickwork db wait` (a Deployment's init container) tell it; and migrations that run at
once (two migration jobs) serialise."""

from __future__ import annotations

import select
import subprocess
import sys
import threading
import time

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, text

from tests.support.waiting import wait_until
from tickwork.services.compose.commands import main
from tickwork.shared.store.engine import create_store_engine
from tickwork.shared.store.migrate import (
    SchemaState,
    current_revision,
    head_revision,
    schema_state,
    upgrade_database,
)

WAIT_TIMEOUT_SECONDS = 30.0


def _fresh(url: str) -> Engine:
    return create_store_engine(url)


class TestSchemaState:
    def test_a_database_moves_from_empty_through_behind_to_current(self, database_url: str) -> None:
        engine = _fresh(database_url)
        try:
            assert schema_state(engine) is SchemaState.EMPTY
            upgrade_database(engine, "0004")
            assert schema_state(engine) is SchemaState.BEHIND
            upgrade_database(engine)
            assert schema_state(engine) is SchemaState.CURRENT
        finally:
            engine.dispose()

    def test_a_revision_this_code_does_not_know_is_ahead_and_usable(self, engine: Engine) -> None:
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = '9999_next_release'"))
        state = schema_state(engine)
        assert state is SchemaState.AHEAD
        assert state.usable
        assert not SchemaState.BEHIND.usable and not SchemaState.EMPTY.usable


class TestDbCheck:
    def test_check_exits_1_and_names_the_upgrade_when_the_schema_is_behind(
        self, database_url: str
    ) -> None:
        result = CliRunner().invoke(main, ["db", "check", "--database-url", database_url])
        assert result.exit_code == 1
        assert result.output == (
            f"the database is empty; this version needs revision {head_revision()}: "
            "run `tickwork db upgrade`\n"
        )

    def test_check_exits_0_on_a_current_schema(
        self, engine: Engine, migrated_database_url: str
    ) -> None:
        result = CliRunner().invoke(main, ["db", "check", "--database-url", migrated_database_url])
        assert result.exit_code == 0
        assert f"at revision {head_revision()}, this version's newest" in result.output

    def test_check_of_an_unreachable_database_is_one_line_and_exit_5(self) -> None:
        url = "postgresql://postgres@127.0.0.1:1/none"
        result = CliRunner().invoke(main, ["db", "check", "--database-url", url])
        assert result.exit_code == 5  # a server out of reach, not invalid input
        assert result.output.count("\n") == 1 and "Traceback" not in result.output


class TestDbUpgrade:
    def test_upgrade_of_a_schema_a_newer_release_migrated_changes_nothing(
        self, engine: Engine, migrated_database_url: str
    ) -> None:
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = '9999_next_release'"))
        result = CliRunner().invoke(
            main, ["db", "upgrade", "--database-url", migrated_database_url]
        )
        assert result.exit_code == 0, result.output
        assert result.output == (
            "database at revision 9999_next_release, newer than this version's: nothing to do\n"
        )
        assert current_revision(engine) == "9999_next_release"

    def test_services_open_a_schema_a_newer_release_migrated(self, engine: Engine) -> None:
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = '9999_next_release'"))
        assert upgrade_database(engine) is False
        assert schema_state(engine) is SchemaState.AHEAD

    def test_upgrade_with_wait_waits_for_the_server_then_gives_up_with_exit_1(self) -> None:
        url = "postgresql://postgres@127.0.0.1:1/none"
        started = time.monotonic()
        result = CliRunner().invoke(main, ["db", "upgrade", "--database-url", url, "--wait", "1"])
        assert result.exit_code == 1
        assert time.monotonic() - started >= 1.0
        assert "waiting: cannot use database" in result.output
        assert "error: gave up after 1s" in result.output

    def test_upgrade_without_wait_of_an_unreachable_server_is_one_line_and_exit_5(self) -> None:
        url = "postgresql://postgres@127.0.0.1:1/none"
        result = CliRunner().invoke(main, ["db", "upgrade", "--database-url", url])
        assert result.exit_code == 5  # a server out of reach, not invalid input
        assert result.output.count("\n") == 1 and "Traceback" not in result.output


class TestDbWait:
    @pytest.mark.slow  # seconds of work: left out of make test-fast
    def test_wait_returns_once_the_migration_has_run(self, postgres_url: str) -> None:
        waiter = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tickwork.services.compose",
                "db",
                "wait",
                "--database-url",
                postgres_url,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert waiter.stderr is not None
            readable, _, _ = select.select([waiter.stderr], [], [], WAIT_TIMEOUT_SECONDS)
            assert readable, "db wait said nothing"
            first = waiter.stderr.readline()
            assert first.startswith("waiting: the database is empty"), first
            assert waiter.poll() is None, "db wait returned before the schema was current"
            engine = _fresh(postgres_url)
            try:
                upgrade_database(engine)
            finally:
                engine.dispose()
            out, err = waiter.communicate(timeout=WAIT_TIMEOUT_SECONDS)
        finally:
            if waiter.poll() is None:
                waiter.kill()
                waiter.wait()
        assert waiter.returncode == 0, err
        assert f"at revision {head_revision()}" in out

    def test_wait_gives_up_after_its_timeout_with_exit_1(self, database_url: str) -> None:
        result = CliRunner().invoke(
            main, ["db", "wait", "--database-url", database_url, "--timeout", "0.5"]
        )
        assert result.exit_code == 1
        assert "error: gave up after 0.5s: the database is empty" in result.output

    def test_wait_refuses_a_url_it_cannot_use_at_once_with_exit_2(self) -> None:
        result = CliRunner().invoke(
            main, ["db", "wait", "--database-url", "mysql://root@127.0.0.1/x", "--timeout", "60"]
        )
        assert result.exit_code == 2
        assert result.output == (
            "error: unsupported database 'mysql': use sqlite:/// or postgresql://\n"
        )

    def test_wait_keeps_waiting_while_the_database_is_unreachable(self) -> None:
        url = "postgresql://postgres@127.0.0.1:1/none"
        started = time.monotonic()
        result = CliRunner().invoke(main, ["db", "wait", "--database-url", url, "--timeout", "1"])
        assert result.exit_code == 1
        assert time.monotonic() - started >= 1.0
        assert "waiting: cannot use database" in result.output


class TestConcurrentUpgrades:
    def test_two_migrations_at_once_both_succeed_and_reach_head_once(
        self, postgres_url: str
    ) -> None:
        errors: list[BaseException] = []

        def migrate() -> None:
            engine = _fresh(postgres_url)
            try:
                upgrade_database(engine)
            except BaseException as exc:
                errors.append(exc)
            finally:
                engine.dispose()

        threads = [threading.Thread(target=migrate) for _ in range(2)]
        for thread in threads:
            thread.start()
        wait_until(
            "both migrations end",
            lambda: not any(t.is_alive() for t in threads),
            WAIT_TIMEOUT_SECONDS,
        )
        assert errors == []
        engine = _fresh(postgres_url)
        try:
            assert current_revision(engine) == head_revision()
        finally:
            engine.dispose()

    def test_an_upgrade_that_deadlocks_with_a_running_process_is_tried_again(
        self, postgres_url: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        # Given a schema behind (0016: the next revision adds a table whose foreign key
        # locks projects), and a process of the previous release that wrote to projects
        # and, with a deadlock timeout longer than the upgrade's, is still in its transaction
        engine = _fresh(postgres_url)
        upgrade_database(engine, "0016")
        errors: list[BaseException] = []

        def migrate() -> None:
            try:
                upgrade_database(engine)
            except BaseException as exc:
                errors.append(exc)

        try:
            with engine.connect() as running, engine.connect() as watcher:
                running.execute(text("SET deadlock_timeout = '30s'"))
                running.execute(text("UPDATE projects SET name = name WHERE false"))
                upgrade = threading.Thread(target=migrate)
                upgrade.start()
                # When the upgrade (holding tasks) waits for projects, and the process
                # then reads tasks: a deadlock, which PostgreSQL breaks by rolling back
                # the upgrade, whose deadlock timeout comes first
                waiting = text(
                    "SELECT count(*) FROM pg_locks "
                    "WHERE NOT granted AND relation = 'projects'::regclass"
                )
                wait_until(
                    "the upgrade waits for projects",
                    lambda: watcher.execute(waiting).scalar_one() == 1,
                    WAIT_TIMEOUT_SECONDS,
                )
                running.execute(text("SELECT count(*) FROM tasks"))
                running.commit()
                upgrade.join(timeout=WAIT_TIMEOUT_SECONDS)
            # Then the upgrade was tried again, and reached the newest revision
            assert not upgrade.is_alive()
            assert errors == []
            assert "deadlock" in caplog.text
            assert current_revision(engine) == head_revision()
        finally:
            engine.dispose()


@pytest.fixture(autouse=True)
def _no_database_url_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TICKWORK_DATABASE_URL", raising=False)
