"""``tickwork api``: serve the REST API with gunicorn on an already migrated database."""

from __future__ import annotations

import click
from sqlalchemy.exc import OperationalError, SQLAlchemyError

from tickwork.services.api.config import API_SETTINGS, ApiConfig
from tickwork.shared.config import LOG_LEVEL
from tickwork.shared.config_options import passed_on_option
from tickwork.shared.errors import StoreUnavailable, TickworkError
from tickwork.shared.exits import fail, fail_unavailable
from tickwork.shared.logging import configure_logging
from tickwork.shared.store.engine import create_store_engine, describe_store_error
from tickwork.shared.store.migrate import is_up_to_date


def _epilog() -> str:
    lines = [
        f"{s.name}: {s.doc}" + (f" (default {s.default})" if s.default else "")
        for s in API_SETTINGS
    ]
    return "\b\nEnvironment:\n" + "\n".join(f"  {line}" for line in lines)


@click.command("api", epilog=_epilog())
@click.option(
    "--bind",
    envvar="TICKWORK_API_BIND",
    default="127.0.0.1:8765",
    show_default=True,
    help="HOST:PORT to listen on (env TICKWORK_API_BIND).",
)
@click.option(
    "--workers",
    envvar="TICKWORK_API_WORKERS",
    type=click.IntRange(1, 256),
    default=2,
    show_default=True,
    help="Worker processes (env TICKWORK_API_WORKERS).",
)
@click.option(
    "--graceful-timeout",
    "graceful_timeout_seconds",
    envvar="TICKWORK_API_GRACEFUL_TIMEOUT",
    type=click.IntRange(1, 3600),
    default=30,
    show_default=True,
    help="Seconds a stopping worker may finish its requests.",
)
@click.option(
    "--connections",
    "connections_per_worker",
    envvar="TICKWORK_API_CONNECTIONS",
    type=click.IntRange(10, 100_000),
    default=1000,
    show_default=True,
    help="Connections each worker holds at once (idle, slow and streams included).",
)
@click.option(
    "--header-timeout",
    "header_timeout_seconds",
    envvar="TICKWORK_API_HEADER_TIMEOUT",
    type=click.IntRange(1, 300),
    default=5,
    show_default=True,
    help="Seconds a client may take to send a request's headers; also the keep-alive.",
)
@click.option(
    "--body-timeout",
    "body_timeout_seconds",
    envvar="TICKWORK_API_BODY_TIMEOUT",
    type=click.IntRange(1, 3600),
    default=10,
    show_default=True,
    help="Seconds a client may pause while sending a body or taking an answer.",
)
@passed_on_option(LOG_LEVEL)
def api_command(
    bind: str,
    workers: int,
    graceful_timeout_seconds: int,
    connections_per_worker: int,
    header_timeout_seconds: int,
    body_timeout_seconds: int,
    log_level: str,
) -> None:
    """Serve the REST API (docs at /api/docs) until SIGTERM."""
    configure_logging(log_level.upper())
    try:
        config = ApiConfig.from_environment()
    except TickworkError as exc:
        fail(f"error: {exc}", exc)
    if not config.database_url:
        fail("error: TICKWORK_DATABASE_URL is not set: name the database to serve")
    if config.auth_enabled and not config.tokens:
        fail(
            "error: no API token is configured: set TICKWORK_API_TOKENS=admin:TOKEN (or "
            "TICKWORK_API_TOKENS_FILE), or TICKWORK_API_AUTH=off to serve without tokens"
        )
    _check_schema(config.database_url)
    # Imported here: the app and gunicorn take half a second to import, which every other
    # `tickwork` command would pay.
    from tickwork.services.api.server import ServerOptions, run_server

    options = ServerOptions(
        bind=bind,
        workers=workers,
        graceful_timeout_seconds=graceful_timeout_seconds,
        connections_per_worker=connections_per_worker,
        header_timeout_seconds=header_timeout_seconds,
        body_timeout_seconds=body_timeout_seconds,
    )
    run_server(config, options)


def _check_schema(database_url: str) -> None:
    """Exit with one line unless the database is reachable and at the newest schema."""
    try:
        engine = create_store_engine(database_url)
    except StoreUnavailable as exc:
        fail(f"error: {exc}", exc)
    try:
        current = is_up_to_date(engine)
    except OperationalError as exc:  # the server cannot be reached
        fail_unavailable(f"error: {describe_store_error(database_url, exc)}")
    except SQLAlchemyError as exc:
        fail(f"error: {describe_store_error(database_url, exc)}")
    finally:
        engine.dispose()  # each worker makes its own after the fork
    if not current:
        fail("error: the database schema is not current; run `tickwork db upgrade` first")
