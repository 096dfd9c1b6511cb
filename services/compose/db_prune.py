"""``tickwork db prune``: apply the retention policy by hand, and say per table what it
removed (or, with ``--dry-run``, what it would remove).

The policy is the scheduler's (``TICKWORK_RETENTION``, ``TICKWORK_LOG_RETENTION``,
``TICKWORK_KEEP_REVISIONS``); ``--older-than`` replaces the history and log spans. It runs
in the same small batches as the scheduler's passes, so it is safe beside live work. A
terminal sees a live count; elsewhere a JSON line says how far it is every
:data:`PROGRESS_EVERY_SECONDS`.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import click
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from tickwork.services.cli.errors import fail
from tickwork.services.compose.options import DATABASE_URL_OPTION
from tickwork.shared.clock import utc_now
from tickwork.shared.errors import InvalidConfig, StoreUnavailable
from tickwork.shared.logging import configure_logging
from tickwork.shared.store.dialects import dialect_of
from tickwork.shared.store.engine import describe_store_error
from tickwork.shared.store.migrate import open_migrated_store
from tickwork.shared.store.retention import (
    PruneResult,
    RetentionPolicy,
    find_project_id,
    parse_duration,
    prune_history,
)

log = logging.getLogger(__name__)

PROGRESS_EVERY_SECONDS = 10.0

Progress = Callable[[str, PruneResult], None]


@click.command("prune")
@DATABASE_URL_OPTION
@click.option(
    "--older-than",
    metavar="DURATION",
    help="Remove finished history (and logs' text) older than this: 30d, 12h, 90m, or a "
    "number of days. Default: TICKWORK_RETENTION and TICKWORK_LOG_RETENTION.",
)
@click.option("--project", metavar="NAME", help="Prune only this project's history.")
@click.option("--dry-run", is_flag=True, help="Change nothing; say what would be removed.")
@click.option(
    "--vacuum",
    is_flag=True,
    help="Then rewrite a SQLite file to give all free space back (a file made before "
    "retention existed); PostgreSQL's autovacuum needs nothing.",
)
def prune(
    database_url: str, older_than: str | None, project: str | None, dry_run: bool, vacuum: bool
) -> None:
    """Remove finished sessions, logs' text and unused revisions older than the retention
    policy, and print the rows removed per table."""
    configure_logging("INFO")
    logging.getLogger("alembic").setLevel(logging.WARNING)  # its "context impl" lines
    policy = _policy(older_than)
    try:
        engine = open_migrated_store(database_url)
    except (StoreUnavailable, SQLAlchemyError) as exc:
        fail(f"error: {exc}")
    try:
        result = _prune(engine, policy, project, dry_run)
        vacuumed = vacuum and not dry_run and dialect_of(engine).vacuum(engine)
    except SQLAlchemyError as exc:
        line = describe_store_error(database_url, exc)
        fail(f"error: {line}", StoreUnavailable(line))
    finally:
        engine.dispose()
    _print_result(result, dry_run)
    if vacuumed:
        click.echo("vacuumed: the database file gave its free space back")


def _policy(older_than: str | None) -> RetentionPolicy:
    """The environment's policy, ``--older-than`` replacing its spans; exits 2 on a bad value."""
    try:
        policy = RetentionPolicy.from_environment()
    except InvalidConfig as exc:
        fail(f"error: {exc}")
    if older_than is None:
        return policy
    try:
        span = parse_duration(older_than)
    except ValueError as exc:
        fail(f"error: --older-than: {exc}")
    return dataclasses.replace(policy, history=span, logs=span)


def _prune(
    engine: Engine, policy: RetentionPolicy, project: str | None, dry_run: bool
) -> PruneResult:
    project_id = None
    if project is not None:
        with engine.connect() as conn:
            project_id = find_project_id(conn, project)
        if project_id is None:
            fail(f"error: --project: no project named {project!r}")
    with _progress(dry_run) as on_batch:
        return prune_history(
            engine, policy, utc_now(), project_id=project_id, dry_run=dry_run, on_batch=on_batch
        )


@contextmanager
def _progress(dry_run: bool) -> Iterator[Progress]:
    """A batch callback showing the rows so far: a live line on a terminal, else a JSON
    log line every :data:`PROGRESS_EVERY_SECONDS`."""
    verb = "counting" if dry_run else "pruning"
    if sys.stderr.isatty():
        from rich.console import Console

        with Console(stderr=True).status(f"{verb}...") as status:
            yield lambda kind, result: status.update(
                f"{verb} {kind}: {result.total:,} rows in {result.batches} batches"
            )
        return
    said = [time.monotonic()]

    def say(kind: str, result: PruneResult) -> None:
        if time.monotonic() - said[0] >= PROGRESS_EVERY_SECONDS:
            said[0] = time.monotonic()
            log.info("%s %s: %d rows in %d batches", verb, kind, result.total, result.batches)

    yield say


def _print_result(result: PruneResult, dry_run: bool) -> None:
    """Rows per table, the logs whose text went, and the total."""
    click.echo("would remove:" if dry_run else "removed:")
    for table, rows in result.per_table().items():
        click.echo(f"  {table:<22} {rows:>10,}")
    click.echo(f"  {'logs (text only)':<22} {result.logs_pruned:>10,}")
    click.echo(f"total: {result.total:,} rows" + (" (dry run: nothing changed)" if dry_run else ""))
