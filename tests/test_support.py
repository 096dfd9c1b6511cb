"""The test fixtures themselves: real, empty, isolated databases and Redis keyspaces."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa

from tests.support.databases import DatabaseSupply
from tests.support.servers import (
    RedisAddress,
    RespClient,
    ThrowawayPostgres,
    ThrowawayRedis,
    find_free_port,
    find_postgres_binaries,
    libpq_conninfo,
    postgres_database_exists,
    postgres_is_reachable,
    redis_answers_ping,
    throwaway_postgres_database,
)
from tickwork.shared.store.migrate import current_revision, head_revision


def table_names(url: str) -> list[str]:
    engine = sa.create_engine(url)
    try:
        return sa.inspect(engine).get_table_names()
    finally:
        engine.dispose()


class TestPostgresDatabases:
    def test_postgres_url_is_a_connectable_empty_throwaway_database(
        self, postgres_url: str
    ) -> None:
        assert postgres_url.startswith("postgresql+psycopg://")
        database = sa.make_url(postgres_url).database
        assert database is not None and database.startswith("tickwork_test_")
        assert table_names(postgres_url) == []

    def test_each_test_gets_its_own_database(
        self, postgres_url: str, postgres_server_url: str
    ) -> None:
        with throwaway_postgres_database(postgres_server_url) as other_url:
            assert other_url != postgres_url

    def test_the_database_is_dropped_afterwards_even_with_open_connections(
        self, postgres_server_url: str
    ) -> None:
        # Given a throwaway database with a connection the test forgot to close
        with throwaway_postgres_database(postgres_server_url) as url:
            name = sa.make_url(url).database
            assert name is not None
            leaked = psycopg.connect(libpq_conninfo(url))
            leaked.execute("CREATE TABLE t (id int)")
            leaked.commit()
            assert postgres_database_exists(postgres_server_url, name)
        # Then leaving the context has dropped it anyway
        assert not postgres_database_exists(postgres_server_url, name)
        leaked.close()


class TestDatabaseUrl:
    def test_database_url_runs_once_per_backend_and_is_empty(
        self, database_url: str, request: pytest.FixtureRequest
    ) -> None:
        backend = request.node.callspec.id
        assert backend in {"sqlite", "postgresql"}
        assert sa.make_url(database_url).get_backend_name() == backend
        engine = sa.create_engine(database_url)
        try:
            with engine.connect() as conn:
                assert conn.execute(sa.text("SELECT 1")).scalar_one() == 1
            assert sa.inspect(engine).get_table_names() == []
        finally:
            engine.dispose()

    def test_sqlite_url_is_a_file_in_the_tests_tmp_path(
        self, sqlite_url: str, tmp_path: Path
    ) -> None:
        assert sqlite_url == f"sqlite:///{tmp_path}/tickwork.db"


class TestMigratedDatabases:
    def test_migrated_database_url_runs_once_per_backend_at_the_newest_schema(
        self, migrated_database_url: str, request: pytest.FixtureRequest
    ) -> None:
        backend = request.node.callspec.id
        assert sa.make_url(migrated_database_url).get_backend_name() == backend
        engine = sa.create_engine(migrated_database_url)
        try:
            assert current_revision(engine) == head_revision()
        finally:
            engine.dispose()

    def test_a_migrated_postgres_database_is_a_copy_of_its_own(
        self, migrated_postgres_url: str, postgres_template: str, postgres_server_url: str
    ) -> None:
        # Given a row written into this test's database
        engine = sa.create_engine(migrated_postgres_url)
        try:
            with engine.begin() as conn:
                conn.execute(sa.text("UPDATE alembic_version SET version_num = 'changed'"))
        finally:
            engine.dispose()
        # Then another migrated database (made from the same template) does not see it
        supply = DatabaseSupply(postgres_server_url, postgres_template, ahead=0)
        try:
            with supply.database() as other_url:
                other = sa.create_engine(other_url)
                try:
                    assert other_url != migrated_postgres_url
                    assert current_revision(other) == head_revision()
                finally:
                    other.dispose()
        finally:
            supply.close()

    def test_a_migrated_sqlite_file_is_a_copy_in_the_tests_tmp_path(
        self, migrated_sqlite_url: str, sqlite_template: Path, tmp_path: Path
    ) -> None:
        assert migrated_sqlite_url == f"sqlite:///{tmp_path}/tickwork.db"
        assert (tmp_path / "tickwork.db").read_bytes() == sqlite_template.read_bytes()


class TestDatabaseSupply:
    def test_every_database_it_made_is_dropped_once_it_is_closed(
        self, postgres_server_url: str
    ) -> None:
        # Given a supply that made one database ahead of each one it handed out
        supply = DatabaseSupply(postgres_server_url, ahead=1)
        try:
            with supply.database() as first, supply.database() as second:
                names = [sa.make_url(url).database for url in (first, second)]
                assert names[0] != names[1]
                assert all(postgres_database_exists(postgres_server_url, n or "") for n in names)
        finally:
            # When it is closed
            supply.close()
        # Then none of them is left on the server
        with psycopg.connect(libpq_conninfo(postgres_server_url)) as conn:
            left = conn.execute(
                "SELECT datname FROM pg_database WHERE datname = ANY(%s)", (names,)
            ).fetchall()
        assert left == []


class TestReachabilityChecks:
    def test_a_closed_postgres_port_is_unreachable_within_the_timeout(self) -> None:
        started = time.monotonic()
        url = f"postgresql+psycopg://postgres@127.0.0.1:{find_free_port()}/postgres"
        assert not postgres_is_reachable(url, timeout_seconds=1)
        assert time.monotonic() - started < 10

    def test_a_closed_redis_port_does_not_answer_ping(self) -> None:
        assert not redis_answers_ping(f"redis://127.0.0.1:{find_free_port()}/0", 1)


class TestRedis:
    def test_the_redis_server_answers_ping(self, redis_url: str) -> None:
        assert redis_answers_ping(redis_url)

    def test_redis_url_names_a_database_number(self, redis_url: str) -> None:
        assert RedisAddress.from_url(redis_url).db >= 0
        assert redis_url.rsplit("/", 1)[-1].isdigit()

    def test_redis_prefix_is_unique_per_test(self, redis_prefix: str) -> None:
        assert redis_prefix.startswith("tickwork-test-") and redis_prefix.endswith(":")

    def test_deleting_a_prefix_keeps_other_keys(self, redis_url: str, redis_prefix: str) -> None:
        other = redis_prefix.replace("tickwork-test-", "tickwork-test-other-")
        with RespClient(RedisAddress.from_url(redis_url)) as client:
            client.command("SET", redis_prefix + "a", "1")
            client.command("SET", redis_prefix + "b", "2")
            client.command("SET", other + "a", "3")
            try:
                assert client.delete_keys_with_prefix(redis_prefix) == 2
                assert client.command("EXISTS", redis_prefix + "a", redis_prefix + "b") == 0
                assert client.command("GET", other + "a") == b"3"
            finally:
                client.command("DEL", other + "a")


@pytest.mark.slow
class TestThrowawayServers:
    def test_a_throwaway_postgres_cluster_starts_and_is_removed(self) -> None:
        bin_dir = find_postgres_binaries()
        if bin_dir is None:
            pytest.skip("no initdb/pg_ctl on this machine")
        server = ThrowawayPostgres.start(bin_dir)
        try:
            assert postgres_is_reachable(server.url)
            with throwaway_postgres_database(server.url) as url:
                assert table_names(url) == []
        finally:
            server.stop()
        assert not server.root.exists()
        assert not postgres_is_reachable(server.url, timeout_seconds=1)

    def test_a_throwaway_redis_server_starts_and_is_removed(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("no redis-server on this machine")
        server = ThrowawayRedis.start(binary)
        try:
            assert redis_answers_ping(server.url)
        finally:
            server.stop()
        assert not server.root.exists()
        assert not redis_answers_ping(server.url, timeout_seconds=1)
