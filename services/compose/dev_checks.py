"""The checks ``tickwork dev`` makes before it starts anything: ports chosen and free,
Redis answering, the database created if missing and migrated, the project valid. Each
failure is one line and exit status 2 (5 for a server out of reach).

:class:`DevSettings`, what ``tickwork dev`` was asked for, lives here so that the checks
and the command (services/compose/dev.py) share it without importing each other."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

from tickwork.services.cli.errors import fail, fail_unavailable
from tickwork.shared.store.urls import printable_url

API_HOST = "127.0.0.1"
METRICS_HOST = "0.0.0.0"  # where the services bind their health and metrics ports
CHECK_TIMEOUT_SECONDS = 3.0
"""Bound of the Redis check made before starting."""
DEFAULT_API_PORT = 8765
DEFAULT_METRICS_BASE_PORT = 9101
PORT_TRIES = 100
"""How many ports (or blocks of ports) after a default one are tried when it is taken."""


@dataclass(frozen=True)
class DevSettings:
    """What ``tickwork dev`` was asked for, checked."""

    database_url: str
    redis_url: str
    redis_prefix: str
    agents: int
    concurrency: int
    api_port: int
    metrics_base_port: int
    state_dir: Path
    log_level: str
    project_dir: Path | None = None
    project_name: str = ""

    @property
    def api_url(self) -> str:
        return f"http://{API_HOST}:{self.api_port}"

    def metrics_ports(self) -> dict[str, int]:
        """Each service but the API (which serves ``/metrics`` itself) and its port."""
        names = ["scheduler", "executor", *(f"agent.{n}" for n in range(1, self.agents + 1))]
        return {name: self.metrics_base_port + i for i, name in enumerate(names)}


def choose_api_port(requested: int | None) -> int:
    """The API's port: ``requested`` (checked by :func:`check_ports`), else the default or,
    when it is taken (a ``tickwork standalone`` or another cluster), the first free one
    after it."""
    if requested is not None:
        return requested
    return _first_free_block(API_HOST, DEFAULT_API_PORT, 1, avoid=set())


def choose_metrics_base_port(requested: int | None, count: int, api_port: int) -> int:
    """The first of the ``count`` metrics ports: ``requested``, else the default or the
    first block of free ports after it."""
    if requested is not None:
        return requested
    return _first_free_block(METRICS_HOST, DEFAULT_METRICS_BASE_PORT, count, avoid={api_port})


def _first_free_block(host: str, start: int, count: int, avoid: set[int]) -> int:
    """The first port of ``count`` consecutive free ones, from ``start`` on; exits with one
    line when none is found within :data:`PORT_TRIES` blocks."""
    for base in range(start, start + PORT_TRIES * count, count):
        block = range(base, base + count)
        if block[-1] > 65535:
            break
        if not avoid.intersection(block) and all(_port_is_free(host, p) for p in block):
            return base
    fail(
        f"error: no {count} free port(s) from {start} on; "
        "choose with --api-port or --metrics-base-port"
    )


def database_name(url: str) -> str:
    """The name of the database ``url`` names (empty if it names none)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    from tickwork.shared.store.urls import multi_host_url

    try:
        return make_url(multi_host_url(url)).database or ""
    except (ArgumentError, ValueError):
        return ""


def check_ports(settings: DevSettings) -> None:
    """Exit with one line if a port the services need is out of range or taken."""
    wanted = [("the API (--api-port)", API_HOST, settings.api_port)]
    wanted += [
        (f"{name}'s metrics (--metrics-base-port)", METRICS_HOST, port)
        for name, port in settings.metrics_ports().items()
    ]
    for what, host, port in wanted:
        if port > 65535:
            fail(f"error: port {port} for {what} is out of range; choose a lower one")
        if port == settings.api_port and host != API_HOST:
            fail(f"error: port {port} is wanted by the API and by {what}; choose another")
        if not _port_is_free(host, port):
            fail(f"error: port {port} for {what} is already taken; choose another")


def _port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As the servers do: a port left in TIME_WAIT by an earlier run is free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def check_redis(url: str) -> None:
    """Exit with one line unless Redis at ``url`` answers PING."""
    from redis.exceptions import RedisError

    from tickwork.shared.dispatch.celery_app import redis_client

    try:
        client = redis_client(url, socket_timeout=CHECK_TIMEOUT_SECONDS)
        with client:
            client.ping()
    except (RedisError, ValueError) as exc:
        fail_unavailable(f"error: cannot use Redis at {printable_url(url)}: {exc}")


def prepare_database(url: str) -> tuple[bool, str]:
    """Create the PostgreSQL database if it is missing, migrate it to the newest schema;
    whether it was created, and its revision. Exits with one line when it cannot."""
    from sqlalchemy.exc import SQLAlchemyError

    from tickwork.shared.errors import StoreUnavailable
    from tickwork.shared.store.dialects import dialect_of
    from tickwork.shared.store.engine import create_store_engine, describe_store_error
    from tickwork.shared.store.migrate import current_revision, upgrade_database

    try:
        engine = create_store_engine(url)
    except StoreUnavailable as exc:
        fail(f"error: {exc}")
    if not dialect_of(engine).serves_many_processes:
        fail("error: --database-url: the services share one PostgreSQL database; name one")
    created = False
    try:
        try:
            current_revision(engine)
        except SQLAlchemyError:
            if not _create_missing_database(url):
                raise  # the database exists: the first error says why it cannot be used
            created = True
        upgrade_database(engine)
        revision = current_revision(engine) or "empty"
    except SQLAlchemyError as exc:
        fail_unavailable(f"error: {describe_store_error(url, exc)}")
    finally:
        engine.dispose()
    return created, revision


def _create_missing_database(url: str) -> bool:
    """Create the database ``url`` names through the server's ``postgres`` database;
    False when it already exists or the server cannot be asked."""
    from sqlalchemy import text
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import SQLAlchemyError

    from tickwork.shared.store.engine import create_store_engine
    from tickwork.shared.store.urls import multi_host_url

    target = make_url(multi_host_url(url))
    maintenance = create_store_engine(
        target.set(database="postgres").render_as_string(hide_password=False)
    )
    try:
        with maintenance.connect() as conn:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            query = text("SELECT 1 FROM pg_database WHERE datname = :name")
            if conn.execute(query, {"name": target.database}).first() is not None:
                return False
            quoted = conn.dialect.identifier_preparer.quote(target.database or "")
            conn.execute(text(f"CREATE DATABASE {quoted}"))
    except SQLAlchemyError:
        return False
    finally:
        maintenance.dispose()
    return True


def read_project(directory: Path) -> tuple[bytes, str]:
    """The project's archive and its revision name (after its content, so a restart with
    the same files adds no revision); exits with its problems when a workflow is invalid."""
    from tickwork.shared.dsl.archive import pack_project, read_project_archive
    from tickwork.shared.errors import TickworkError

    if not directory.is_dir():
        fail(f"error: --project: no such directory: {directory}")
    try:
        archive = pack_project(directory)
        digest = read_project_archive(archive).digest
    except OSError as exc:
        fail(f"error: cannot pack {directory}: {exc.strerror or exc}")
    except TickworkError as exc:
        fail(f"error: {directory}: {exc}")
    return archive, f"local-{digest[:16]}"
