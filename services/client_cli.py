"""``tickwork push|workflows|start|sessions|attempts|attempt|tasks|retry|log``: the API client.

Each command is one or two REST calls (docs/rest-api.md) through :class:`ApiClient`; an
error ends it with one line and the exit status its kind has (see ``--help``).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from services.cli_support import build_params
from services.client_log import log_command
from services.client_support import (
    EXIT_CODES_HELP,
    EXIT_FAILED,
    EXIT_INVALID,
    F,
    api,
    client_options,
    exit_with,
    field,
    limit_option,
    print_fields,
    print_items,
    print_json,
    text,
)

DONE_STATES = frozenset({"success", "error", "canceled", "killed"})
WAIT_POLL_SECONDS = 0.5

PARAM_OPTION = click.option(
    "-p",
    "--param",
    "raw_params",
    multiple=True,
    metavar="KEY=VALUE",
    help="A session parameter; repeatable; a.b=v sets a nested key.",
)

ATTEMPT_FIELDS = [
    "id",
    "name",
    "project",
    "workflow",
    "session_id",
    "session_time",
    "state",
    "params",
    "resume_from_attempt_id",
    "idempotency_key",
    "created_at",
    "finished_at",
    "alerts",
]


@click.command("push", epilog=EXIT_CODES_HELP)
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--project", "project", required=True, help="Project name.")
@click.option("--revision", help="Revision name (default: a new UUID).")
@click.option("--schedule-from", metavar="TIME", help="New schedules start from this time.")
@client_options
def push_command(
    directory: Path,
    project: str,
    revision: str | None,
    schedule_from: str | None,
    endpoint: str | None,
    as_json: bool,
) -> None:
    """Upload DIRECTORY's workflows as a new revision of a project (created if needed).

    Every workflow is validated first; one invalid file rejects the upload, and every
    problem is printed as file:line: message (exit status 2).
    """
    from shared.dsl.archive import pack_project

    try:
        archive = pack_project(directory)
    except OSError as exc:
        exit_with(EXIT_INVALID, f"error: cannot pack {directory}: {exc.strerror or exc}")
    with api(endpoint) as client:
        pushed = client.push_project(
            project, archive, revision=revision, schedule_from=schedule_from
        )
    if as_json:
        print_json(pushed)
        return
    _print_push(project, pushed)


def _print_push(project: str, pushed: dict[str, Any]) -> None:
    new = pushed.get("created", True)
    state = "a new revision" if new else "unchanged: it already held these files"
    click.echo(f"project {project}: revision {text(pushed.get('revision'))} ({state})")
    click.echo(f"  workflows: {', '.join(pushed.get('workflows') or []) or '-'}")
    changes = pushed.get("schedules") or {}
    for change in ("added", "updated", "removed"):
        if changes.get(change):
            click.echo(f"  schedules {change}: {', '.join(changes[change])}")


@click.command("workflows", epilog=EXIT_CODES_HELP)
@click.argument("project", required=False)
@limit_option
@client_options
def workflows_command(project: str | None, limit: int, endpoint: str | None, as_json: bool) -> None:
    """List the workflows of every project's latest revision (or of PROJECT's)."""
    with api(endpoint) as client:
        items = list(client.list_workflows(project, limit=limit))
    print_items(
        items,
        as_json,
        [
            ("project", field("project")),
            ("workflow", field("name")),
            ("revision", field("revision")),
            ("last session", field("last_session.session_time")),
            ("last state", field("last_session.state")),
            ("next run", _next_run),
        ],
    )


def _next_run(workflow: dict[str, Any]) -> object:
    if workflow.get("paused"):
        return "paused"
    return workflow.get("next_run_time")


@click.command("start", epilog=EXIT_CODES_HELP)
@click.argument("project")
@click.argument("workflow")
@click.option("--session", "session_time", metavar="TIME", help="Session time (default: now).")
@PARAM_OPTION
@click.option("--idempotency-key", metavar="KEY", help="Starting again with KEY is refused.")
@click.option("--wait", is_flag=True, help="Wait until it ends; exit 1 unless it succeeded.")
@client_options
def start_command(
    project: str,
    workflow: str,
    session_time: str | None,
    raw_params: tuple[str, ...],
    idempotency_key: str | None,
    wait: bool,
    endpoint: str | None,
    as_json: bool,
) -> None:
    """Start a session of WORKFLOW by hand; the same session twice is a conflict (exit 4)."""
    params = build_params(raw_params)
    with api(endpoint) as client:
        attempt = client.start_attempt(
            project,
            workflow,
            session_time=session_time,
            params=params,
            idempotency_key=idempotency_key,
        )
        if not as_json:
            click.echo(
                f"attempt {attempt.get('id')} of {project}/{workflow} session "
                f"{attempt.get('session_time')}: {attempt.get('state')}"
            )
        if wait:
            attempt = _wait_for(client, str(attempt["id"]), quiet=as_json)
    if as_json:
        print_json(attempt)
    if wait and attempt.get("state") != "success":
        sys.exit(EXIT_FAILED)


def _wait_for(client: Any, attempt_id: str, *, quiet: bool) -> dict[str, Any]:
    """Poll an attempt until it ends."""
    while True:
        attempt: dict[str, Any] = client.get_attempt(attempt_id)
        if attempt.get("done") or attempt.get("state") in DONE_STATES:
            if not quiet:
                click.echo(f"attempt {attempt_id}: {attempt.get('state')}")
            return attempt
        time.sleep(WAIT_POLL_SECONDS)


def history_filters(command: F) -> F:
    """``[PROJECT [WORKFLOW]] --state --limit`` and the client options of a history listing."""
    decorators = (
        click.argument("project", required=False),
        click.argument("workflow", required=False),
        click.option("--state", help="Only these in this state (e.g. error, running)."),
        limit_option,
        client_options,
    )
    for decorate in reversed(decorators):
        command = decorate(command)
    return command


@click.command("sessions", epilog=EXIT_CODES_HELP)
@history_filters
def sessions_command(
    project: str | None,
    workflow: str | None,
    state: str | None,
    limit: int,
    endpoint: str | None,
    as_json: bool,
) -> None:
    """List sessions, newest first, each with its last attempt."""
    with api(endpoint) as client:
        items = list(client.list_sessions(project, workflow, state, limit=limit))
    print_items(
        items,
        as_json,
        [
            ("id", field("id")),
            ("project", field("project")),
            ("workflow", field("workflow")),
            ("session time", field("session_time")),
            ("attempt", field("last_attempt.id")),
            ("state", field("last_attempt.state", "state")),
            ("created", field("last_attempt.created_at", "created_at")),
        ],
    )


@click.command("attempts", epilog=EXIT_CODES_HELP)
@history_filters
def attempts_command(
    project: str | None,
    workflow: str | None,
    state: str | None,
    limit: int,
    endpoint: str | None,
    as_json: bool,
) -> None:
    """List attempts, newest first."""
    with api(endpoint) as client:
        items = list(client.list_attempts(project, workflow, state, limit=limit))
    print_items(
        items,
        as_json,
        [
            ("id", field("id")),
            ("project", field("project")),
            ("workflow", field("workflow")),
            ("session time", field("session_time")),
            ("state", field("state")),
            ("created", field("created_at")),
            ("finished", field("finished_at")),
        ],
    )


@click.command("attempt", epilog=EXIT_CODES_HELP)
@click.argument("attempt_id", metavar="ID")
@client_options
def attempt_command(attempt_id: str, endpoint: str | None, as_json: bool) -> None:
    """Show one attempt."""
    with api(endpoint) as client:
        attempt = client.get_attempt(attempt_id)
    print_fields(attempt, as_json, ATTEMPT_FIELDS)


@click.command("tasks", epilog=EXIT_CODES_HELP)
@click.argument("attempt_id", metavar="ID")
@client_options
def tasks_command(attempt_id: str, endpoint: str | None, as_json: bool) -> None:
    """Show the task tree of an attempt."""
    with api(endpoint) as client:
        tasks = client.list_tasks(attempt_id)
    print_items(
        tasks,
        as_json,
        [
            ("id", field("id")),
            ("task", field("full_name", "name")),
            ("state", field("state")),
            ("started", field("started_at")),
            ("finished", field("finished_at")),
            ("error", field("error.message", "error")),
        ],
    )


@click.command("retry", epilog=EXIT_CODES_HELP)
@click.argument("attempt_id", metavar="ID")
@click.option("--all", "mode", flag_value="all", help="Run every task again.")
@click.option(
    "--resume",
    "mode",
    flag_value="failed",
    default=True,
    help="Run only what did not succeed (the default).",
)
@click.option("--from", "from_task", metavar="+TASK", help="Run from this task on.")
@PARAM_OPTION
@click.option("--wait", is_flag=True, help="Wait until it ends; exit 1 unless it succeeded.")
@client_options
def retry_command(
    attempt_id: str,
    mode: str,
    from_task: str | None,
    raw_params: tuple[str, ...],
    wait: bool,
    endpoint: str | None,
    as_json: bool,
) -> None:
    """Start a new attempt of the session of attempt ID."""
    if from_task is not None:
        if mode == "all":
            raise click.UsageError("give one of --all, --resume and --from")
        mode = "from"
    params = build_params(raw_params)
    with api(endpoint) as client:
        attempt = client.retry_attempt(attempt_id, mode=mode, from_task=from_task, params=params)
        if not as_json:
            click.echo(f"attempt {attempt.get('id')} retries attempt {attempt_id} ({mode})")
        if wait:
            attempt = _wait_for(client, str(attempt["id"]), quiet=as_json)
    if as_json:
        print_json(attempt)
    if wait and attempt.get("state") != "success":
        sys.exit(EXIT_FAILED)


CLIENT_COMMANDS = (
    push_command,
    workflows_command,
    start_command,
    sessions_command,
    attempts_command,
    attempt_command,
    tasks_command,
    retry_command,
    log_command,
)
