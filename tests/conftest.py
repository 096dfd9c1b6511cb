"""Fixtures giving tests real, throwaway PostgreSQL databases, SQLite files and Redis keyspaces.

Servers come from TICKWORK_TEST_DATABASE_URL / TICKWORK_TEST_REDIS_URL; when those are not
reachable, a throwaway server is started from local binaries for the session. PostgreSQL is
checked once, before the first test runs, and only if a selected test needs it; Redis is
checked when a test first asks for `redis_url`.

Migrating a database runs every Alembic migration, so it is done once per session (per
pytest-xdist worker): into a PostgreSQL template database that each test's migrated
database is created from (`CREATE DATABASE ... TEMPLATE`), and into a SQLite file that each
test gets a copy of. `postgres_url`, `sqlite_url` and `database_url` stay empty, for the
tests of migrating itself; `migrated_*` and `engine` give the newest schema.
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis
from sqlalchemy import Engine

from tests.fault._cluster import Cluster
from tests.support.databases import DatabaseSupply
from tests.support.files import MachineFiles
from tests.support.servers import (
    RedisAddress,
    RespClient,
    ServerUnavailable,
    ThrowawayPostgres,
    ThrowawayRedis,
    find_postgres_binaries,
    postgres_is_reachable,
    postgres_template_database,
    redis_answers_ping,
)
from tickwork.shared.dispatch.leases import LeaseStore
from tickwork.shared.store.engine import create_store_engine
from tickwork.shared.store.migrate import upgrade_database

DEFAULT_DATABASE_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"

# Fixtures whose use means a test needs the PostgreSQL server.
_POSTGRES_FIXTURES = frozenset(
    {"postgres_server_url", "postgres_url", "postgres_template", "migrated_postgres_url"}
    | {"empty_postgres_databases", "migrated_postgres_databases"}
)
_postgres_server_key = pytest.StashKey[str]()


def _discover_postgres(config: pytest.Config) -> str:
    """Return the URL of a reachable server's maintenance database, starting one if needed."""
    if _postgres_server_key in config.stash:
        return config.stash[_postgres_server_key]
    url = os.environ.get("TICKWORK_TEST_DATABASE_URL", DEFAULT_DATABASE_URL)
    if not postgres_is_reachable(url):
        bin_dir = find_postgres_binaries()
        if bin_dir is None:
            pytest.exit(
                f"PostgreSQL is not reachable at {url} and no local server binaries were "
                "found; install the 'postgresql' package",
                returncode=2,
            )
        try:
            server = ThrowawayPostgres.start(bin_dir)
        except ServerUnavailable as exc:
            pytest.exit(
                f"PostgreSQL is not reachable at {url} and a throwaway server from {bin_dir} "
                f"did not start: {exc}",
                returncode=2,
            )
        config.add_cleanup(server.stop)
        url = server.url
    config.stash[_postgres_server_key] = url
    return url


def _needs_postgres(item: pytest.Item) -> bool:
    names = set(getattr(item, "fixturenames", ()))
    if names & _POSTGRES_FIXTURES:
        return True
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return False
    backends = (callspec.params.get(name) for name in ("database_url", "migrated_database_url"))
    return "postgresql" in backends


_machine_files_key = pytest.StashKey[MachineFiles]()
_XDIST_WORKER = "PYTEST_XDIST_WORKER"  # set in each pytest-xdist worker process


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_machine_files_key] = MachineFiles.snapshot()


@pytest.fixture(autouse=True)
def _machine_files_unchanged(pytestconfig: pytest.Config) -> Iterator[None]:
    """Fails the test after which a file of the machine (/etc/passwd, ...) changed, and puts
    the file back: tests run as root, and a path joined onto a root can be absolute."""
    yield
    changed = pytestconfig.stash[_machine_files_key].changed()
    # Under pytest-xdist the change may come from a test running meanwhile in another
    # worker: the run fails either way, and the message says where else to look.
    elsewhere = " (or one running at the same time)" if _XDIST_WORKER in os.environ else ""
    assert not changed, (
        f"this test{elsewhere} changed files outside its temporary directories: {changed}"
    )


@pytest.fixture(scope="session", autouse=True)
def _children_temporary_directory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The processes the tests start (services, Celery's pool processes, shells) make their
    temporary files under the session's own temporary directory, not in /tmp: one that a
    fault spec kills cannot remove what it made (billiard's ``pymp-*`` folders)."""
    directory = tmp_path_factory.mktemp("children-tmp")
    previous = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(directory)
    try:
        yield directory
    finally:
        if previous is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = previous


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # A change made outside any test (a fixture's teardown, a plugin) fails the run too.
    files = session.config.stash.get(_machine_files_key, None)
    changed = files.changed() if files is not None else []
    if changed:
        session.config.get_terminal_writer().line(
            f"files outside the tests' temporary directories changed: {changed}", red=True
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_collection_finish(session: pytest.Session) -> None:
    # Fail fast, before any test runs, rather than in the middle of the session.
    if session.config.option.collectonly:
        return
    if any(_needs_postgres(item) for item in session.items):
        _discover_postgres(session.config)


@pytest.fixture(scope="session")
def postgres_server_url(pytestconfig: pytest.Config) -> str:
    """SQLAlchemy URL of the test server's `postgres` database (for admin work only)."""
    return _discover_postgres(pytestconfig)


@pytest.fixture(scope="session")
def empty_postgres_databases(postgres_server_url: str) -> Iterator[DatabaseSupply]:
    """Where `postgres_url` comes from (made ahead, dropped in the background)."""
    supply = DatabaseSupply(postgres_server_url)
    yield supply
    supply.close()


@pytest.fixture
def postgres_url(empty_postgres_databases: DatabaseSupply) -> Iterator[str]:
    """SQLAlchemy URL of a new, empty database `tickwork_test_<hex>`, dropped afterwards."""
    with empty_postgres_databases.database() as url:
        yield url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """SQLAlchemy URL of a SQLite file in the test's temporary directory (not yet created)."""
    return f"sqlite:///{tmp_path}/tickwork.db"


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest) -> str:
    """An empty database on each backend in turn: test ids end in [sqlite] / [postgresql]."""
    fixture = "sqlite_url" if request.param == "sqlite" else "postgres_url"
    url: str = request.getfixturevalue(fixture)
    return url


def _migrate(url: str) -> None:
    engine = create_store_engine(url)
    try:
        upgrade_database(engine)
    finally:
        engine.dispose()  # a template database must have no connection left


@pytest.fixture(scope="session")
def postgres_template(postgres_server_url: str) -> Iterator[str]:
    """Name of a database `tickwork_tpl_<hex>` migrated to the newest schema, once per
    session (per xdist worker), dropped at the end; never connect to it (it is copied)."""
    with postgres_template_database(postgres_server_url, _migrate) as name:
        yield name


@pytest.fixture(scope="session")
def migrated_postgres_databases(
    postgres_server_url: str, postgres_template: str
) -> Iterator[DatabaseSupply]:
    """Where `migrated_postgres_url` comes from (made ahead, dropped in the background)."""
    supply = DatabaseSupply(postgres_server_url, postgres_template)
    yield supply
    supply.close()


@pytest.fixture
def migrated_postgres_url(migrated_postgres_databases: DatabaseSupply) -> Iterator[str]:
    """SQLAlchemy URL of a new database `tickwork_test_<hex>` at the newest schema (a copy
    of `postgres_template`), dropped afterwards."""
    with migrated_postgres_databases.database() as url:
        yield url


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated to the newest schema, once per session (per xdist worker)."""
    path = tmp_path_factory.mktemp("sqlite-template") / "tickwork.db"
    _migrate(f"sqlite:///{path}")
    # The last connection closed checkpointed the write-ahead log into the file itself.
    assert not path.with_name(f"{path.name}-wal").exists(), "the template has an open WAL"
    return path


@pytest.fixture
def migrated_sqlite_url(sqlite_template: Path, tmp_path: Path) -> str:
    """`sqlite_url`'s file, created as a copy of `sqlite_template` (the newest schema)."""
    path = tmp_path / "tickwork.db"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture(params=["sqlite", "postgresql"])
def migrated_database_url(request: pytest.FixtureRequest) -> str:
    """A database at the newest schema on each backend in turn: ids end in [sqlite] /
    [postgresql]."""
    fixture = "migrated_sqlite_url" if request.param == "sqlite" else "migrated_postgres_url"
    url: str = request.getfixturevalue(fixture)
    return url


@pytest.fixture
def engine(migrated_database_url: str) -> Iterator[Engine]:
    """An engine on a fresh, migrated database (each backend in turn): the database of
    `migrated_database_url`."""
    engine = create_store_engine(migrated_database_url)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def redis_server_url() -> Iterator[str]:
    """URL (with db number) of a Redis that answers PING, started for the session if needed."""
    url = os.environ.get("TICKWORK_TEST_REDIS_URL", DEFAULT_REDIS_URL)
    if redis_answers_ping(url):
        yield url
        return
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.exit(
            f"Redis is not reachable at {url} and no local redis-server binary was found; "
            "install the 'redis-server' package",
            returncode=2,
        )
    try:
        server = ThrowawayRedis.start(binary)
    except ServerUnavailable as exc:
        pytest.exit(
            f"Redis is not reachable at {url} and a throwaway redis-server did not start: {exc}",
            returncode=2,
        )
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def redis_prefix() -> str:
    """A key prefix `tickwork-test-<hex>:` unique to this test."""
    return f"tickwork-test-{secrets.token_hex(6)}:"


@pytest.fixture
def redis_url(redis_server_url: str, redis_prefix: str) -> Iterator[str]:
    """URL of the test Redis; keys starting with `redis_prefix` are deleted afterwards."""
    yield redis_server_url
    with RespClient(RedisAddress.from_url(redis_server_url)) as client:
        client.delete_keys_with_prefix(redis_prefix)


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[Redis]:
    """A client of the test Redis (keys under `redis_prefix` are removed afterwards)."""
    client = Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def leases(redis_client: Redis, redis_prefix: str) -> LeaseStore:
    """Task leases in the test's Redis keyspace."""
    return LeaseStore(redis_client, redis_prefix)


@pytest.fixture
def cluster(
    migrated_postgres_url: str, redis_url: str, redis_prefix: str, tmp_path: Path
) -> Iterator[Cluster]:
    """A distributed cluster of real processes (tests/fault/_cluster.py) on the test's
    servers; no process started yet, and every one it starts is killed however the test ends."""
    with Cluster(migrated_postgres_url, redis_url, redis_prefix, tmp_path) as started:
        yield started
