"""``tickwork start|sessions|attempts|attempt|retry|kill``: sessions and their attempts.

Each command is one or two REST calls (docs/rest-api.md) through :class:`ApiClient`; an
error ends it with one line and the exit status its kind has (see ``--help``).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tickwork.services.cli.admin_api import ADMIN_EPILOG, kill_via_api
from tickwork.services.cli.client import (
    ATTEMPT_ID,
    SESSION_ID,
    F,
    RecordId,
    api,
    client_options,
    limit_option,
    no_database_url,
)
from tickwork.services.cli.errors import EXIT_CODES_HELP, ExitCode
from tickwork.services.cli.failures import (
    echo_failure_report,
    read_failure_report,
    running_lines,
    with_failures,
)
from tickwork.services.cli.output import field, print_fields, print_items, print_json, text
from tickwork.services.cli.params import (
    PARAM_OPTION,
    PARAMS_FILE_OPTION,
    SESSION_HELP,
    build_params,
    resolve_session_option,
)

if TYPE_CHECKING:
    from tickwork.services.cli.api_client import ApiClient

DONE_STATES = frozenset({"success", "error", "canceled", "killed"})
WAIT_POLL_SECONDS = 0.5

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


@click.command("start", epilog=EXIT_CODES_HELP)
@click.argument("project")
@click.argument("workflow")
@click.option("--session", "session_time", metavar="TIME", help=SESSION_HELP)
@PARAM_OPTION
@PARAMS_FILE_OPTION
@click.option(
    "-r", "--revision", metavar="NAME", help="Run this revision's workflow (default: the latest)."
)
@click.option("--idempotency-key", metavar="KEY", help="Starting again with KEY is refused.")
@click.option("-d", "--dry-run", is_flag=True, help="Show what would start, and start nothing.")
@click.option("--wait", is_flag=True, help="Wait until it ends; exit 1 unless it succeeded.")
@client_options
def start_command(
    project: str,
    workflow: str,
    session_time: str | None,
    raw_params: tuple[str, ...],
    params_file: Path | None,
    revision: str | None,
    idempotency_key: str | None,
    dry_run: bool,
    wait: bool,
    endpoint: str | None,
    as_json: bool,
) -> None:
    """Start a session of WORKFLOW by hand; the same session twice is a conflict (exit 4)."""
    params = build_params(raw_params, params_file)
    with api(endpoint) as client:
        if dry_run:
            _show_start(client, project, workflow, session_time, revision, params, as_json)
            return
        attempt = client.start_attempt(
            project,
            workflow,
            session_time=resolve_session_option(client, project, workflow, session_time),
            params=params,
            idempotency_key=idempotency_key,
            revision=revision,
        )
        if not as_json:
            click.echo(
                f"attempt {attempt.get('id')} of {project}/{workflow} session "
                f"{text(attempt.get('session_time'))}: {attempt.get('state')}"
            )
        if wait:
            _wait_and_report(client, str(attempt["id"]), as_json)
            return
    if as_json:
        print_json(attempt)


def _show_start(
    client: ApiClient,
    project: str,
    workflow: str,
    session_time: str | None,
    revision: str | None,
    params: dict[str, Any],
    as_json: bool,
) -> None:
    """What ``start`` would start, checked against the API (the project, the workflow and
    the revision exist; the session time reads), without starting it."""
    found = client.get_project_workflow(project, workflow, revision)
    when = resolve_session_option(client, project, workflow, session_time)
    plan = {
        "project": project,
        "workflow": workflow,
        "revision": found.get("revision"),
        "session_time": when.isoformat() if when is not None else None,
        "params": params,
    }
    if as_json:
        print_json(plan)
        return
    shown = plan["session_time"] or "now (the last scheduled time for a scheduled workflow)"
    click.echo(f"would start {project}/{workflow} of revision {plan['revision']}, session {shown}")
    click.echo(f"  params: {json.dumps(params, sort_keys=True)}")
    click.echo("  (dry run: nothing was started)")


def _wait_and_report(client: ApiClient, attempt_id: str, as_json: bool) -> None:
    """Wait for an attempt to end and print how it ended, with what failed (as JSON: the
    attempt with its ``failures``); exit 1 unless it succeeded."""
    attempt = _wait_for(client, attempt_id)
    report = read_failure_report(client, attempt)
    if as_json:
        print_json(with_failures(attempt, report))
    else:
        click.echo(f"attempt {attempt_id}: {attempt.get('state')}")
        echo_failure_report(report, attempt_id)
    if attempt.get("state") != "success":
        sys.exit(ExitCode.FAILED)


def _wait_for(client: ApiClient, attempt_id: str) -> dict[str, Any]:
    """Poll an attempt until it ends."""
    while True:
        attempt: dict[str, Any] = client.get_attempt(attempt_id)
        if attempt.get("done") or attempt.get("state") in DONE_STATES:
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
    """List sessions, newest first, each with its last attempt; or show the session
    whose id is the one number given (tickwork sessions 42)."""
    if project is not None and project.isdigit() and workflow is None and state is None:
        with api(endpoint) as client:
            found = client.get_session(project)
        if as_json:
            print_json(found)
            return
        last = found.get("last_attempt") or {}
        shown = {**found, "last_attempt": last.get("id"), "state": last.get("state")}
        fields = ["id", "project", "workflow", "session_time", "session_uuid"]
        print_fields(shown, as_json, [*fields, "last_attempt", "state"])
        return
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
@click.option("--session", "session_id", type=SESSION_ID, metavar="ID", help="Only this session's.")
@history_filters
def attempts_command(
    session_id: str | None,
    project: str | None,
    workflow: str | None,
    state: str | None,
    limit: int,
    endpoint: str | None,
    as_json: bool,
) -> None:
    """List attempts, newest first (of one session with --session)."""
    if session_id is not None and (project or workflow or state):
        raise click.UsageError("--session lists one session's attempts: give no other filter")
    with api(endpoint) as client:
        if session_id is not None:
            items = list(client.list_session_attempts(session_id, limit=limit))
        else:
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
@click.argument("attempt_id", type=ATTEMPT_ID, metavar="ID")
@client_options
def attempt_command(attempt_id: str, endpoint: str | None, as_json: bool) -> None:
    """Show one attempt.

    For an attempt that failed, the tasks that failed follow, each with its error and the
    last lines of its log; for one that runs, the tasks running now.
    """
    with api(endpoint) as client:
        attempt = client.get_attempt(attempt_id)
        report = read_failure_report(client, attempt)
        running = _running_tasks(client, attempt) if not as_json else []
    if as_json:
        print_json(with_failures(attempt, report))
        return
    print_fields(attempt, as_json, ATTEMPT_FIELDS)
    echo_failure_report(report, attempt_id)
    for line in running:
        click.echo(line)


def _running_tasks(client: ApiClient, attempt: dict[str, Any]) -> list[str]:
    """``running +wf+task (since T)`` lines of an attempt that has not ended."""
    if attempt.get("done") or attempt.get("state") in DONE_STATES:
        return []
    return running_lines(client.list_tasks(str(attempt["id"])))


@click.command("retry", epilog=EXIT_CODES_HELP)
@click.argument("attempt_id", type=ATTEMPT_ID, metavar="ID")
@click.option("--all", "mode", flag_value="all", help="Run every task again.")
@click.option(
    "--resume",
    "mode",
    flag_value="failed",
    default=True,
    help="Run only what did not succeed (the default).",
)
@click.option(
    "--from",
    "--resume-from",
    "from_task",
    metavar="+TASK",
    help="Run from this task on (Digdag's --resume-from).",
)
@click.option(
    "--keep-revision",
    "revision",
    flag_value="",
    default=True,
    help="Run the workflow of the retried attempt's revision (the default).",
)
@click.option(
    "--latest-revision",
    "revision",
    flag_value="latest",
    help="Run the workflow of the project's latest revision.",
)
@click.option("--revision", "revision", metavar="NAME", help="Run this revision's workflow.")
@click.option("--name", metavar="NAME", help="The new attempt's name (default retry-N).")
@PARAM_OPTION
@PARAMS_FILE_OPTION
@click.option("--wait", is_flag=True, help="Wait until it ends; exit 1 unless it succeeded.")
@client_options
def retry_command(
    attempt_id: str,
    mode: str,
    from_task: str | None,
    revision: str,
    name: str | None,
    raw_params: tuple[str, ...],
    params_file: Path | None,
    wait: bool,
    endpoint: str | None,
    as_json: bool,
) -> None:
    """Start a new attempt of the session of attempt ID."""
    if from_task is not None:
        if mode == "all":
            raise click.UsageError("give one of --all, --resume and --from")
        mode = "from"
    params = build_params(raw_params, params_file)
    with api(endpoint) as client:
        attempt = client.retry_attempt(
            attempt_id,
            mode=mode,
            from_task=from_task,
            params=params,
            revision=revision or None,
            name=name,
        )
        if not as_json:
            click.echo(f"attempt {attempt.get('id')} retries attempt {attempt_id} ({mode})")
        if wait:
            _wait_and_report(client, str(attempt["id"]), as_json)
            return
    if as_json:
        print_json(attempt)


@click.command("kill", epilog=ADMIN_EPILOG)
@click.argument("attempt_id", type=RecordId("attempt", int), metavar="ID")
@no_database_url
@client_options
def kill_command(attempt_id: int, endpoint: str | None, as_json: bool) -> None:
    """Kill an attempt: queued tasks are revoked, running ones stopped, and it ends killed."""
    kill_via_api(endpoint, attempt_id, as_json)
