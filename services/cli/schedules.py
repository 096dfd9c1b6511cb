"""``tickwork schedules`` and ``backfill``: the scheduler's controls.

With ``--database-url`` (env ``TICKWORK_DATABASE_URL``) the controls work on the store
directly, an operator's path; without it they ask the REST API (``--endpoint``).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from services.cli.admin_api import (
    ADMIN_EPILOG,
    backfill_via_api,
    list_schedules_via_api,
    missed_via_api,
    pause_via_api,
    print_schedules,
    resume_via_api,
    skip_via_api,
)
from services.cli.client import client_options
from services.cli.errors import did_you_mean, fail
from services.cli.output import format_time
from services.cli.params import ADMIN_DATABASE_OPTION, parse_session_time
from shared.clock import utc_now
from shared.domain.schedule import ScheduleSpec, parse_schedule
from shared.dsl.parser import parse_workflow_file
from shared.errors import InvalidInput, InvalidSchedule, NotFound

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from shared.store.schedules import ScheduleRow

MAX_SKIP = 10_000
"""Session times one skip may pass: shared.store.schedules.MAX_SKIP, which the store
enforces (a test checks that the two agree); kept here so that this module imports no
store code."""


def _spec_from(cron: str | None, workflow_file: Path | None, timezone: str | None) -> ScheduleSpec:
    """The schedule to preview: ``--cron``'s, or the workflow file's (every option of it),
    moved to ``--timezone`` when one is given."""
    if (cron is None) == (workflow_file is None):
        raise click.UsageError("give either --cron EXPR or a workflow FILE")
    if cron is not None:
        try:
            return parse_schedule({"cron>": cron}, timezone or "UTC")
        except InvalidSchedule as exc:
            option = "--timezone" if exc.key == "timezone" else "--cron"
            fail(f"error: {option}: {exc.message}")
    assert workflow_file is not None
    try:
        definition = parse_workflow_file(workflow_file, workflow_file.parent.resolve())
    except InvalidInput as exc:
        fail(str(exc).splitlines()[0] if str(exc) else "error: invalid workflow")
    if definition.schedule is None:
        fail(f"error: {workflow_file}: the workflow has no 'schedule:'")
    spec = ScheduleSpec.from_config(definition.schedule)
    if timezone is not None:
        try:
            return parse_schedule(spec.raw(), timezone)
        except InvalidSchedule as exc:
            fail(f"error: --timezone: {exc.message}")
    return spec


def _jitter_seed(workflow_file: Path | None) -> str:
    """The seed the scheduler draws a workflow's jitter from once its folder is pushed
    under its own name (``tickwork push``'s default): ``project/workflow``."""
    if workflow_file is None:
        return ""
    path = workflow_file.resolve()
    return f"{path.parent.name}/{path.stem}"


def preview_lines(spec: ScheduleSpec, after: datetime, count: int, seed: str = "") -> list[str]:
    """One line per upcoming session: its time, then its run time where that differs."""
    lines = []
    for session_time in spec.session_times(after, count):
        run = spec.run_time(session_time, seed)
        line = format_time(spec.local(session_time))
        if run != session_time:
            line += f"  runs at {format_time(spec.local(run))}"
        lines.append(line)
    return lines


@click.group("schedules", invoke_without_command=True, epilog=ADMIN_EPILOG)
@ADMIN_DATABASE_OPTION
@client_options
@click.pass_context
def schedules_group(
    ctx: click.Context, database_url: str | None, endpoint: str | None, as_json: bool
) -> None:
    """List schedules (the default), preview times, and pause, resume or skip a schedule."""
    if ctx.invoked_subcommand is None:
        # ctx.invoke fills in only the defaults, not the environment: pass the options on.
        ctx.invoke(list_command, database_url=database_url, endpoint=endpoint, as_json=as_json)


@schedules_group.command("preview")
@click.argument(
    "workflow_file", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.option("--cron", help='A schedule expression, e.g. "0 7 * * 1-5" or "@every 90m".')
@click.option("--timezone", help="IANA time zone (default: the workflow's, or UTC).")
@click.option("--from", "raw_from", help="Start after this time (default: now).")
@click.option("--count", type=click.IntRange(1, 10_000), default=10, show_default=True)
def preview_command(
    workflow_file: Path | None,
    cron: str | None,
    timezone: str | None,
    raw_from: str | None,
    count: int,
) -> None:
    """Print the next session times of a cron expression or a workflow's schedule.

    A session that starts later than its time (delay, jitter) shows when it runs; jitter
    is drawn as for the project named after the file's folder.
    """
    spec = _spec_from(cron, workflow_file, timezone)
    after = parse_session_time(raw_from, spec.timezone, "'--from'") if raw_from else utc_now()
    lines = preview_lines(spec, after, count, _jitter_seed(workflow_file))
    if not lines:
        click.echo(f"no session time after {format_time(spec.local(after))}", err=True)
    for line in lines:
        click.echo(line)


@schedules_group.command("list", epilog=ADMIN_EPILOG)
@ADMIN_DATABASE_OPTION
@client_options
def list_command(database_url: str | None, endpoint: str | None, as_json: bool) -> None:
    """List active schedules with their next session time."""
    if database_url is None:
        list_schedules_via_api(endpoint, as_json)
        return
    from services.cli.store_access import store_transaction
    from shared.store import schedules as schedule_store
    from shared.store.schedule_reads import schedule_json

    with store_transaction(database_url, write=False) as conn:
        rows = schedule_store.list_schedules(conn)
    print_schedules([schedule_json(row) for row in rows], as_json)


def _find(conn: Connection, project: str, workflow: str) -> ScheduleRow:
    """The schedule of ``project``/``workflow``; NotFound naming the closest scheduled
    project or workflow when there is none."""
    from shared.store import schedules as schedule_store

    try:
        return schedule_store.find_schedule(conn, project, workflow)
    except NotFound as exc:
        rows = schedule_store.list_schedules(conn)
        projects = {row.project_name for row in rows}
        if project not in projects:
            hint = did_you_mean(project, projects)
            raise NotFound(f"no project '{project}' with a schedule{hint}") from None
        workflows = {row.workflow_name for row in rows if row.project_name == project}
        raise NotFound(f"{exc}{did_you_mean(workflow, workflows)}") from None


@schedules_group.command("pause", epilog=ADMIN_EPILOG)
@click.argument("project")
@click.argument("workflow")
@ADMIN_DATABASE_OPTION
@client_options
def pause_command(
    project: str, workflow: str, database_url: str | None, endpoint: str | None, as_json: bool
) -> None:
    """Pause a schedule: runs due from now on do not happen until it is resumed."""
    if database_url is None:
        pause_via_api(endpoint, project, workflow, as_json)
        return
    from services.cli.store_access import store_transaction
    from shared.store import schedules as schedule_store

    with store_transaction(database_url) as conn:
        changed = schedule_store.pause_schedule(conn, _find(conn, project, workflow).id, utc_now())
    click.echo(f"{project}/{workflow}: {'paused' if changed else 'was already paused'}")


@schedules_group.command("resume", epilog=ADMIN_EPILOG)
@click.argument("project")
@click.argument("workflow")
@click.option("--replay", is_flag=True, help="Also run the times due while it was paused.")
@ADMIN_DATABASE_OPTION
@client_options
def resume_command(
    project: str,
    workflow: str,
    replay: bool,
    database_url: str | None,
    endpoint: str | None,
    as_json: bool,
) -> None:
    """Resume a paused schedule (the paused span is skipped unless --replay)."""
    if database_url is None:
        resume_via_api(endpoint, project, workflow, replay, as_json)
        return
    from services.cli.store_access import store_transaction
    from shared.store import schedules as schedule_store

    with store_transaction(database_url) as conn:
        row = _find(conn, project, workflow)
        changed = schedule_store.resume_schedule(conn, row.id, utc_now(), replay=replay)
    click.echo(f"{project}/{workflow}: {'resumed' if changed else 'was not paused'}")


@schedules_group.command("skip", epilog=ADMIN_EPILOG)
@click.argument("project")
@click.argument("workflow")
@click.option("--to", "raw_to", help="Skip every session time before this one.")
@click.option(
    "--count",
    type=click.IntRange(1, MAX_SKIP),
    help="Skip the next N session times.",
)
@ADMIN_DATABASE_OPTION
@client_options
def skip_command(
    project: str,
    workflow: str,
    raw_to: str | None,
    count: int | None,
    database_url: str | None,
    endpoint: str | None,
    as_json: bool,
) -> None:
    """Skip upcoming session times (recorded as missed, so a backfill can still run them)."""
    if (raw_to is None) == (count is None):
        raise click.UsageError("give either --to TIME or --count N")
    if database_url is None:
        skip_via_api(endpoint, project, workflow, raw_to, count, as_json)
        return
    from services.cli.store_access import store_transaction
    from shared.store import schedules as schedule_store

    with store_transaction(database_url) as conn:
        row = _find(conn, project, workflow)
        to = None if raw_to is None else parse_session_time(raw_to, row.timezone, "'--to'")
        skipped = schedule_store.skip_schedule(conn, row.id, utc_now(), to=to, count=count)
    if not skipped:
        click.echo(f"{project}/{workflow}: nothing to skip")
        return
    spec = row.schedule
    first, last = format_time(spec.local(skipped[0])), format_time(spec.local(skipped[-1]))
    click.echo(f"{project}/{workflow}: skipped {len(skipped)} session time(s), {first} .. {last}")


@schedules_group.command("missed", epilog=ADMIN_EPILOG)
@click.argument("project")
@click.argument("workflow")
@ADMIN_DATABASE_OPTION
@client_options
def missed_command(
    project: str, workflow: str, database_url: str | None, endpoint: str | None, as_json: bool
) -> None:
    """Show the session times a schedule did not emit, and why."""
    if database_url is None:
        missed_via_api(endpoint, project, workflow, as_json)
        return
    from services.cli.store_access import store_transaction
    from shared.store import schedules as schedule_store

    with store_transaction(database_url, write=False) as conn:
        row = _find(conn, project, workflow)
        missed = schedule_store.list_missed(conn, row.id)
    spec = row.schedule
    if not missed:
        click.echo(f"{project}/{workflow}: no missed session times")
    for item in missed:
        count = "many" if item.count is None else str(item.count)
        click.echo(
            f"{format_time(spec.local(item.first_session_time))} .. "
            f"{format_time(spec.local(item.last_session_time))}  {count} time(s)  {item.reason}"
        )


@click.command("backfill", epilog=ADMIN_EPILOG)
@click.argument("project")
@click.argument("workflow")
@click.option("--from", "raw_from", required=True, help="First session time (inclusive).")
@click.option("--to", "raw_to", required=True, help="Last session time (inclusive).")
@click.option("--parallel", is_flag=True, help="Let the sessions run side by side.")
@click.option("--dry-run", is_flag=True, help="Only print the session times.")
@ADMIN_DATABASE_OPTION
@client_options
def backfill_command(
    project: str,
    workflow: str,
    raw_from: str,
    raw_to: str,
    parallel: bool,
    dry_run: bool,
    database_url: str | None,
    endpoint: str | None,
    as_json: bool,
) -> None:
    """Create sessions for every scheduled time in a range; existing ones are kept."""
    if database_url is None:
        window = (raw_from, raw_to)
        backfill_via_api(endpoint, project, workflow, window, parallel, dry_run, as_json)
        return
    from services.cli.store_access import store_transaction
    from shared.store import emission as emission_store

    with store_transaction(database_url) as conn:
        row = _find(conn, project, workflow)
        first = parse_session_time(raw_from, row.timezone, "'--from'")
        last = parse_session_time(raw_to, row.timezone, "'--to'")
        if last < first:
            raise click.BadParameter("ends before --from", param_hint="'--to'")
        plan = emission_store.backfill(
            conn, row, first, last, utc_now(), parallel=parallel, dry_run=dry_run
        )
    spec = row.schedule
    for session_time in plan.created:
        click.echo(
            f"{'would create' if dry_run else 'created'} {format_time(spec.local(session_time))}"
        )
    order = "side by side" if parallel else "one after another"
    verb = "would create" if dry_run else "created"
    summary = f"{verb} {len(plan.created)} session(s), {order}; {len(plan.existing)} existed"
    click.echo(summary)
