"""``tickwork db import-logs DIR``: move the task log files of an earlier release (its
``TICKWORK_LOG_DIR``) into the store, once (see :mod:`tickwork.shared.store.log_import`).

Idempotent and resumable: run it again after a crash and it goes on where it was. A bar
shows the bytes on a terminal; elsewhere a JSON line says how far it is every
:data:`PROGRESS_EVERY_FILES` files. The last line is the report.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from datetime import datetime
from pathlib import Path

import click
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from tickwork.services.cli.errors import fail
from tickwork.services.compose.options import DATABASE_URL_OPTION
from tickwork.shared.clock import utc_now
from tickwork.shared.errors import StoreUnavailable
from tickwork.shared.logging import configure_logging
from tickwork.shared.store.engine import describe_store_error
from tickwork.shared.store.log_import import (
    ImportReport,
    LogFileFound,
    find_log_files,
    import_log_file,
)
from tickwork.shared.store.migrate import open_migrated_store

log = logging.getLogger(__name__)

PROGRESS_EVERY_FILES = 1000


@click.command("import-logs")
@DATABASE_URL_OPTION
@click.argument(
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
)
def import_logs(database_url: str, directory: Path) -> None:
    """Move the task log files under DIR (an earlier release's TICKWORK_LOG_DIR) into the
    store. Safe to run again, or after a crash: what is stored already is skipped."""
    if not directory.is_dir():
        raise click.BadParameter(f"{directory} is not a directory", param_hint="'DIR'")
    configure_logging("INFO")
    try:
        engine = open_migrated_store(database_url)
    except (StoreUnavailable, SQLAlchemyError) as exc:
        fail(f"error: {exc}")
    report = ImportReport()
    try:
        found = list(find_log_files(directory, report.refused))
        _import_all(engine, found, report)
    except SQLAlchemyError as exc:
        line = describe_store_error(database_url, exc)
        fail(f"error: {line}", StoreUnavailable(line))
    except OSError as exc:
        fail(f"error: cannot read {directory}: {exc.strerror or exc}")
    finally:
        engine.dispose()
    for line in report.refused[:20]:
        click.echo(f"refused: {line}", err=True)
    for line in report.unknown[:20]:
        click.echo(f"skipped: {line}", err=True)
    click.echo(json.dumps(report.as_json()))


def _import_all(engine: Engine, found: list[LogFileFound], report: ImportReport) -> None:
    """Import each file, showing progress (a bar on a terminal, JSON lines otherwise)."""
    total = sum(f.size_bytes for f in found)
    now = utc_now()
    if sys.stderr.isatty():
        from rich.progress import Progress

        with Progress(transient=False) as bar:
            task = bar.add_task(f"importing {len(found):,} log files", total=total)
            for file in found:
                _import_one(engine, file, now, report)
                bar.advance(task, file.size_bytes)
        return
    said = time.monotonic()
    for number, file in enumerate(found, 1):
        _import_one(engine, file, now, report)
        if number % PROGRESS_EVERY_FILES == 0 or time.monotonic() - said > 10:
            said = time.monotonic()
            log.info("imported %d of %d log files", number, len(found))


def _import_one(engine: Engine, file: LogFileFound, now: datetime, report: ImportReport) -> None:
    """Import one file, counting what became of it."""
    try:
        stored = import_log_file(engine, file, now)
    except OSError as exc:
        report.refused.append(f"{file.relative}: {exc.strerror or exc}")
        return
    if stored is None:
        report.unknown.append(f"{file.relative}: the store has no task {file.task_id}")
    elif stored == 0:
        report.already += 1
    else:
        report.imported += 1
        report.bytes_imported += stored
