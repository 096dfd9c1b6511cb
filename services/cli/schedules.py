"""``tickwork schedules`` and ``backfill``: the scheduler's controls.

Every control asks the REST API (``--endpoint``); only ``preview`` works alone.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import click

from tickwork.services.cli.admin_api import (
    ADMIN_EPILOG,
    backfill_via_api,
    list_schedules_via_api,
    missed_via_api,
    pause_via_api,
    resume_via_api,
    skip_via_api,
)
from tickwork.services.cli.client import client_options, no_database_url
from tickwork.services.cli.errors import fail
from tickwork.services.cli.output import format_time
from tickwork.services.cli.params import parse_session_time
from tickwork.shared.clock import utc_now
from tickwork.shared.domain.schedule import ScheduleSpec, parse_schedule
from tickwork.shared.dsl.parser import parse_workflow_file
from tickwork.shared.errors import InvalidInput, InvalidSchedule

MAX_SKIP = 10_000
"""Session times one skip may pass: tickwork.shared.store.schedules.MAX_SKIP, which the store
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
@no_database_url
@client_options
@click.pass_context
def schedules_group(ctx: click.Context, endpoint: str | None, as_json: bool) -> None:
    """List schedules (the default), preview times, and pause, resume or skip a schedule."""
    if ctx.invoked_subcommand is None:
        # ctx.invoke fills in only the defaults, not the environment: pass the options on.
        ctx.invoke(list_command, endpoint=endpoint, as_json=as_json)


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
@no_database_url
@client_options
def list_command(endpoint: str | None, as_json: bool) -> None:
    """List active schedules with their next session time."""
    list_schedules_via_api(endpoint, as_json)


@schedules_group.command("pause", epilog=ADMIN_EPILOG)
@click.argument("project")
@click.argument("workflow")
@no_database_url
@client_options
def pause_command(project: str, workflow: str, endpoint: str | None, as_json: bool) -> None:
    """Pause a schedule: runs due from now on do not happen until it is resumed."""
    pause_via_api(endpoint, project, workflow, as_json)


@schedules_group.command("resume", epilog=ADMIN_EPILOG)
@click.argument("project")
@click.argument("workflow")
@click.option("--replay", is_flag=True, help="Also run the times due while it was paused.")
@no_database_url
@client_options
def resume_command(
    project: str, workflow: str, replay: bool, endpoint: str | None, as_json: bool
) -> None:
    """Resume a paused schedule (the paused span is skipped unless --replay)."""
    resume_via_api(endpoint, project, workflow, replay, as_json)


@schedules_group.command("skip", epilog=ADMIN_EPILOG)
@click.argument("project")
@click.argument("workflow")
@click.option("--to", "raw_to", help="Skip every session time before this one.")
@click.option(
    "--count",
    type=click.IntRange(1, MAX_SKIP),
    help="Skip the next N session times.",
)
@no_database_url
@client_options
def skip_command(
    project: str,
    workflow: str,
    raw_to: str | None,
    count: int | None,
    endpoint: str | None,
    as_json: bool,
) -> None:
    """Skip upcoming session times (recorded as missed, so a backfill can still run them)."""
    if (raw_to is None) == (count is None):
        raise click.UsageError("give either --to TIME or --count N")
    skip_via_api(endpoint, project, workflow, raw_to, count, as_json)


@schedules_group.command("missed", epilog=ADMIN_EPILOG)
@click.argument("project")
@click.argument("workflow")
@no_database_url
@client_options
def missed_command(project: str, workflow: str, endpoint: str | None, as_json: bool) -> None:
    """Show the session times a schedule did not emit, and why."""
    missed_via_api(endpoint, project, workflow, as_json)


@click.command("backfill", epilog=ADMIN_EPILOG)
@click.argument("project")
@click.argument("workflow")
@click.option("--from", "raw_from", required=True, help="First session time (inclusive).")
@click.option("--to", "raw_to", required=True, help="Last session time (inclusive).")
@click.option("--parallel", is_flag=True, help="Let the sessions run side by side.")
@click.option("--dry-run", is_flag=True, help="Only print the session times.")
@no_database_url
@client_options
def backfill_command(
    project: str,
    workflow: str,
    raw_from: str,
    raw_to: str,
    parallel: bool,
    dry_run: bool,
    endpoint: str | None,
    as_json: bool,
) -> None:
    """Create sessions for every scheduled time in a range; existing ones are kept."""
    window = (raw_from, raw_to)
    backfill_via_api(endpoint, project, workflow, window, parallel, dry_run, as_json)
