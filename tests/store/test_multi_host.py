"""A store URL may name several PostgreSQL servers, as libpq does
(``postgresql://USER@HOST1:PORT1,HOST2:PORT2/DB?target_session_attrs=read-write``): the
engine connects to the first that accepts writes, and when the server it holds connections
to stops accepting them (a primary demoted, or a standby reached before a switch), the
statement that met "read-only" fails once and the pool drops every connection to it.
``tickwork db`` commands take the same URLs.

Two real servers made with ``initdb`` stand for an old and a new primary."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from tests.e2e._run import tickwork_command
from tests.support.servers import (
    ThrowawayPostgres,
    find_free_port,
    find_postgres_binaries,
    libpq_conninfo,
)
from tickwork.shared.store.engine import create_store_engine, libpq_url
from tickwork.shared.store.urls import multi_host_url, printable_url

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def two_servers() -> Iterator[tuple[ThrowawayPostgres, ThrowawayPostgres]]:
    bin_dir = find_postgres_binaries()
    if bin_dir is None:
        pytest.skip("needs PostgreSQL's server binaries (initdb, pg_ctl)")
    first = ThrowawayPostgres.start(bin_dir)
    try:
        second = ThrowawayPostgres.start(bin_dir)
    except BaseException:
        first.stop()
        raise
    try:
        for server in (first, second):
            _admin(server, "CREATE TABLE marks (n int)")
        yield first, second
    finally:
        first.stop()
        second.stop()


def _admin(server: ThrowawayPostgres, statement: str) -> None:
    with psycopg.connect(libpq_conninfo(server.url), autocommit=True) as conn:
        conn.execute(statement.encode())


def _url(first: ThrowawayPostgres, second: ThrowawayPostgres) -> str:
    hosts = f"127.0.0.1:{first.port},127.0.0.1:{second.port}"
    return f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write"


def _port(conn: sa.Connection) -> int:
    return int(conn.execute(sa.text("SELECT inet_server_port()")).scalar_one())


def _wait_until_every_pooled_session_is_read_only(engine: sa.Engine) -> None:
    """pg_reload_conf() only signals: the postmaster and then each session take the new
    setting in their own time (a session idle at the wire between its next two commands)."""
    deadline = time.monotonic() + 10
    while True:
        held = [engine.connect() for _ in range(3)]
        try:
            seen = {
                c.execute(sa.text("SHOW default_transaction_read_only")).scalar_one() for c in held
            }
        finally:
            for conn in held:
                conn.close()
        if seen == {"on"}:
            return
        assert time.monotonic() < deadline, f"the pooled sessions still say {seen}"
        time.sleep(0.05)


def test_a_connection_that_meets_read_only_is_dropped_and_the_writable_server_used(
    two_servers: tuple[ThrowawayPostgres, ThrowawayPostgres],
) -> None:
    first, second = two_servers
    engine = create_store_engine(_url(first, second), pool_size=3)
    try:
        # Given a pool of connections to the first server, which accepts writes
        held = [engine.connect() for _ in range(3)]
        assert {_port(conn) for conn in held} == {first.port}
        for conn in held:
            conn.close()
        # When it stops accepting them (demoted: read-only by default from now on)
        _admin(first, "ALTER SYSTEM SET default_transaction_read_only = on")
        _admin(first, "SELECT pg_reload_conf()")
        _wait_until_every_pooled_session_is_read_only(engine)
        # Then the statement in flight fails as read-only
        with pytest.raises(DBAPIError, match="read-only transaction"), engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO marks VALUES (1)"))
        # and every connection after it goes to the writable server
        for _ in range(3):
            with engine.begin() as conn:
                assert _port(conn) == second.port
                conn.execute(sa.text("INSERT INTO marks VALUES (2)"))
    finally:
        engine.dispose()
        _admin(first, "ALTER SYSTEM RESET default_transaction_read_only")
        _admin(first, "SELECT pg_reload_conf()")


def test_libpq_s_multi_host_form_is_read_as_sqlalchemy_s() -> None:
    url = "postgresql://app:pw@db-a:5432,db-b:5433/jobs?target_session_attrs=read-write"
    assert multi_host_url(url) == (
        "postgresql://app:pw@/jobs?host=db-a,db-b&port=5432,5433&target_session_attrs=read-write"
    )
    assert "pw" not in printable_url(url) and "db-a%2Cdb-b" in printable_url(url)
    assert libpq_url(url).startswith("postgresql://app:pw@/jobs?")
    assert multi_host_url("postgresql://app@db-a/jobs") == "postgresql://app@db-a/jobs"


def test_tickwork_db_commands_take_a_multi_host_url_and_use_the_host_that_answers(
    postgres_url: str, tmp_path: Path
) -> None:
    server = make_url(postgres_url)
    dead = find_free_port()  # nothing listens there: libpq goes on to the next host
    url = (
        f"postgresql://postgres@127.0.0.1:{dead},{server.host}:{server.port}/{server.database}"
        "?target_session_attrs=read-write"
    )
    env = {**os.environ, "TICKWORK_DATABASE_URL": url}
    for args, said in ((["db", "upgrade"], "revision"), (["db", "check"], "newest")):
        done = subprocess.run(
            [*tickwork_command(), *args],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert said in done.stdout + done.stderr
