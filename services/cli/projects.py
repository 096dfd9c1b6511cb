"""``tickwork push|workflows``: projects and their workflows, through the API.

Each command is one or two REST calls (docs/rest-api.md) through :class:`ApiClient`; an
error ends it with one line and the exit status its kind has (see ``--help``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from services.cli.client import api, client_options, limit_option
from services.cli.errors import EXIT_CODES_HELP, ExitCode, exit_with
from services.cli.output import field, print_items, print_json, text


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
        exit_with(ExitCode.INVALID, f"error: cannot pack {directory}: {exc.strerror or exc}")
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
