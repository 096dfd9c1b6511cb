"""What ``tickwork kill``, ``schedules``, ``schedules pause|resume|skip|missed`` and
``backfill`` ask the API, and how they print its answers."""

from __future__ import annotations

from typing import Any

import click

from tickwork.services.cli.client import api
from tickwork.services.cli.errors import EXIT_CODES_HELP
from tickwork.services.cli.output import field, format_time, print_items, print_json, text

ADMIN_EPILOG = (
    "\b\nThe command asks the tickwork API at --endpoint (--database-url is gone: to work\n"
    "on a database no API serves yet, start `tickwork api` or `tickwork standalone` on it).\n\n"
    + EXIT_CODES_HELP
)


def kill_via_api(endpoint: str | None, attempt_id: int, as_json: bool) -> None:
    """Ask the API to kill an attempt (one that has already ended is a conflict, exit 4)."""
    with api(endpoint) as client:
        attempt = client.kill_attempt(str(attempt_id))
    if as_json:
        print_json(attempt)
        return
    state = attempt.get("state")
    click.echo(f"attempt {attempt_id}: {'killing' if state == 'canceling' else state}")


def list_schedules_via_api(endpoint: str | None, as_json: bool) -> None:
    """List every schedule the API knows."""
    with api(endpoint) as client:
        items = list(client.list_schedules())
    print_schedules(items, as_json)


def print_schedules(items: list[dict[str, Any]], as_json: bool) -> None:
    """Schedules in the REST API's JSON form, as JSON lines or a table."""
    print_items(
        items,
        as_json,
        [
            ("id", field("id")),
            ("project", field("project")),
            ("workflow", field("workflow")),
            ("schedule", field("schedule")),
            ("next session", field("next_session_time")),
            ("next run", field("next_run_time")),
            ("state", field("state")),
        ],
    )


def missed_via_api(endpoint: str | None, project: str, workflow: str, as_json: bool) -> None:
    """The recent session times ``project``/``workflow``'s schedule did not emit, and why."""
    with api(endpoint) as client:
        schedule = client.get_schedule(str(client.find_schedule(project, workflow)["id"]))
    if not schedule.get("missed") and not as_json:
        click.echo(f"{project}/{workflow}: no missed session times")
    for item in schedule.get("missed", []):
        if as_json:
            print_json(item)
            continue
        count = "many" if item["count"] is None else str(item["count"])
        click.echo(
            f"{format_time(item['first_session_time'])} .. "
            f"{format_time(item['last_session_time'])}  "
            f"{count} time(s)  {item['reason']}"
        )


def pause_via_api(endpoint: str | None, project: str, workflow: str, as_json: bool) -> None:
    """Pause the schedule of ``project``/``workflow`` through the API."""
    with api(endpoint) as client:
        found = client.find_schedule(project, workflow)
        schedule = client.pause_schedule(str(found["id"]))
    _report(schedule, as_json, f"{project}/{workflow}: {_was(found, True, 'paused')}")


def resume_via_api(
    endpoint: str | None, project: str, workflow: str, replay: bool, as_json: bool
) -> None:
    """Resume the schedule of ``project``/``workflow`` through the API."""
    with api(endpoint) as client:
        found = client.find_schedule(project, workflow)
        schedule = client.resume_schedule(str(found["id"]), replay=replay)
    _report(schedule, as_json, f"{project}/{workflow}: {_was(found, False, 'resumed')}")


def skip_via_api(
    endpoint: str | None,
    project: str,
    workflow: str,
    to: str | None,
    count: int | None,
    as_json: bool,
) -> None:
    """Skip session times of ``project``/``workflow``'s schedule through the API."""
    with api(endpoint) as client:
        schedule_id = str(client.find_schedule(project, workflow)["id"])
        answer = client.skip_schedule(schedule_id, to=to, count=count)
    skipped = int(answer.get("skipped") or 0)
    if as_json:
        print_json(answer)
    elif not skipped:
        click.echo(f"{project}/{workflow}: nothing to skip")
    else:
        click.echo(
            f"{project}/{workflow}: skipped {skipped} session time(s), "
            f"{text(answer.get('first_session_time'))} .. {text(answer.get('last_session_time'))}"
        )


def backfill_via_api(
    endpoint: str | None,
    project: str,
    workflow: str,
    window: tuple[str, str],
    parallel: bool,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Backfill ``project``/``workflow``'s schedule from ``window[0]`` to ``window[1]``."""
    with api(endpoint) as client:
        schedule_id = str(client.find_schedule(project, workflow)["id"])
        plan = client.backfill_schedule(
            schedule_id, start=window[0], end=window[1], parallel=parallel, dry_run=dry_run
        )
    if as_json:
        print_json(plan)
        return
    created = plan.get("created") or []
    existing = plan.get("existing") or []
    verb = "would create" if dry_run else "created"
    for session_time in created:
        click.echo(f"{verb} {format_time(session_time)}")
    order = "side by side" if parallel else "one after another"
    click.echo(f"{verb} {len(created)} session(s), {order}; {len(existing)} existed")


def _report(schedule: dict[str, Any], as_json: bool, line: str) -> None:
    if as_json:
        print_json(schedule)
    else:
        click.echo(line)


def _was(before: dict[str, Any], paused: bool, done: str) -> str:
    """``done``, or what the schedule already was when pausing or resuming changed nothing."""
    if bool(before.get("paused")) != paused:
        return done
    return "was already paused" if paused else "was not paused"
