"""``tickwork db``: migrate the schema (``upgrade``), say whether this version can use it
(``check``), and wait until it can (``wait``, a Deployment's init container).

On Kubernetes the migration Job and the services start together: ``upgrade --wait`` waits
for the database server to answer, ``wait`` for the Job to have migrated it. A bad URL is
an error at once (exit 2); a server that does not answer is waited for, saying so every
:data:`SAY_SECONDS`, until the timeout (exit 1), or is an error at once without one (exit 5,
a server out of reach).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import click
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from tickwork.services.cli.errors import fail
from tickwork.services.compose.db_logs import import_logs
from tickwork.services.compose.db_prune import prune
from tickwork.services.compose.options import DATABASE_URL_OPTION
from tickwork.shared.errors import StoreUnavailable
from tickwork.shared.store.engine import create_store_engine, describe_store_error
from tickwork.shared.store.migrate import (
    SchemaState,
    current_revision,
    head_revision,
    schema_state,
    upgrade_database,
)

POLL_SECONDS = 2.0
SAY_SECONDS = 15.0


@click.group("db")
def db_group() -> None:
    """Database schema commands."""


def schema_line(engine: Engine) -> tuple[SchemaState, str]:
    """The schema's state and a sentence saying it."""
    state = schema_state(engine)
    current, head = current_revision(engine), head_revision()
    lines = {
        SchemaState.EMPTY: f"the database is empty; this version needs revision {head}",
        SchemaState.BEHIND: f"the database is at revision {current}; this version needs {head}",
        SchemaState.CURRENT: f"the database is at revision {current}, this version's newest",
        SchemaState.AHEAD: (
            f"the database is at revision {current}, newer than this version's {head} "
            "(a newer release migrated it; usable)"
        ),
    }
    return state, lines[state]


def wait_for_schema(
    database_url: str, timeout: float, done: Callable[[SchemaState], bool]
) -> tuple[Engine, SchemaState, str]:
    """Poll until the database answers and ``done(state)``; the engine, state and its
    sentence. Exits 2 on a bad URL at once, 5 on a server out of reach when ``timeout`` is 0,
    and 1 once ``timeout`` seconds have passed."""
    try:
        engine = create_store_engine(database_url)
    except StoreUnavailable as exc:
        fail(f"error: {exc}")
    deadline = time.monotonic() + timeout
    said, said_at = "", 0.0
    while True:
        try:
            state, line = schema_line(engine)
            if done(state):
                return engine, state, line
        except SQLAlchemyError as exc:
            line = describe_store_error(database_url, exc)
        if timeout == 0:
            engine.dispose()
            fail(f"error: {line}", StoreUnavailable(line))
        if line != said or time.monotonic() - said_at >= SAY_SECONDS:
            click.echo(f"waiting: {line}", err=True)
            said, said_at = line, time.monotonic()
        if time.monotonic() >= deadline:
            engine.dispose()
            click.echo(f"error: gave up after {timeout:g}s: {line}", err=True)
            sys.exit(1)
        time.sleep(min(POLL_SECONDS, max(deadline - time.monotonic(), 0.0)))


@db_group.command("upgrade")
@DATABASE_URL_OPTION
@click.option(
    "--wait",
    "wait_seconds",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Wait this long for the database server to answer first (a migration Job that "
    "starts beside the database); 0: fail at once.",
)
def upgrade(database_url: str, wait_seconds: float) -> None:
    """Migrate the database to the newest schema (a no-op when it is current, or newer)."""
    engine, _state, _line = wait_for_schema(database_url, wait_seconds, lambda _state: True)
    try:
        was = current_revision(engine)
        migrated = upgrade_database(engine)
        after = current_revision(engine)
    except SQLAlchemyError as exc:
        line = describe_store_error(database_url, exc)
        fail(f"error: {line}", StoreUnavailable(line))
    finally:
        engine.dispose()
    if not migrated:
        click.echo(f"database at revision {after}, newer than this version's: nothing to do")
    else:
        click.echo(f"database at revision {after} (was {was or 'empty'})")


@db_group.command("check")
@DATABASE_URL_OPTION
def check(database_url: str) -> None:
    """Say whether the schema is one this version can use: exit 0 if so, 1 if
    `tickwork db upgrade` is due."""
    engine, state, line = wait_for_schema(database_url, 0.0, lambda _state: True)
    engine.dispose()
    click.echo(line if state.usable else f"{line}: run `tickwork db upgrade`")
    sys.exit(0 if state.usable else 1)


@db_group.command("wait")
@DATABASE_URL_OPTION
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=300.0,
    show_default=True,
    help="Give up after this many seconds (exit 1).",
)
def wait(database_url: str, timeout: float) -> None:
    """Wait until the database is reachable and its schema is one this version can use
    (an init container's command: the migration Job may still be running)."""
    engine, _state, line = wait_for_schema(database_url, timeout, lambda state: state.usable)
    engine.dispose()
    click.echo(line)


db_group.add_command(import_logs)
db_group.add_command(prune)
