"""``tickwork push|delete|workflows|download``: projects and their workflows, through the API.

Each command is one or two REST calls (docs/rest-api.md) through :class:`ApiClient`; an
error ends it with one line and the exit status its kind has (see ``--help``).
"""

from __future__ import annotations

import io
import sys
import tarfile
from pathlib import Path
from typing import Any

import click

from tickwork.services.cli.client import api, client_options, limit_option
from tickwork.services.cli.errors import EXIT_CODES_HELP, ExitCode, exit_with
from tickwork.services.cli.output import field, print_fields, print_items, print_json, text


@click.command("push", epilog=EXIT_CODES_HELP)
@click.argument(
    "directory",
    default=".",
    required=False,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
)
@click.option("--project", "project", help="Project name (default: DIRECTORY's name).")
@click.option("--revision", help="Revision name (default: a new UUID).")
@click.option("--schedule-from", metavar="TIME", help="New schedules start from this time.")
@client_options
def push_command(
    directory: Path,
    project: str | None,
    revision: str | None,
    schedule_from: str | None,
    endpoint: str | None,
    as_json: bool,
) -> None:
    """Upload DIRECTORY's workflows as a new revision of a project (created if needed).

    DIRECTORY is the current one unless given, and the project is named after it unless
    --project names it. Every workflow is validated first; one invalid file rejects the
    upload, and every problem is printed as file:line: message (exit status 2).
    """
    from tickwork.shared.dsl.archive import pack_project

    project = project or directory.resolve().name

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
    for warning in pushed.get("warnings") or []:
        click.echo(f"warning: {warning}", err=True)


@click.command("delete", epilog=EXIT_CODES_HELP)
@click.argument("project")
@click.option("--force", is_flag=True, help="Delete without asking.")
@client_options
def delete_command(project: str, force: bool, endpoint: str | None, as_json: bool) -> None:
    """Delete PROJECT: its schedules stop; its sessions, attempts and revisions stay.

    On a terminal it asks first unless --force; without a terminal it needs --force.
    """
    with api(endpoint) as client:
        client.require_names(project)
        if not force:
            _confirm_delete(project)
        deleted = client.delete_project(project)
    if as_json:
        print_json(deleted)
        return
    click.echo(f"project {project} deleted: its schedules are gone, its history stays")


def _confirm_delete(project: str) -> None:
    """Ask on the terminal (exit 1 on no); without a terminal, refuse (exit 2)."""
    if not sys.stdin.isatty():
        exit_with(
            ExitCode.INVALID,
            f"error: not deleting project {project} without confirmation: "
            "there is no terminal to ask on; give --force",
        )
    if not click.confirm(f"Delete project {project} and its schedules?"):
        exit_with(ExitCode.FAILED, "not deleted")


@click.command("workflows", epilog=EXIT_CODES_HELP)
@click.argument("project", required=False)
@click.argument("workflow", required=False)
@click.option(
    "-r", "--revision", metavar="NAME", help="With WORKFLOW: of this revision (default: latest)."
)
@limit_option
@client_options
def workflows_command(
    project: str | None,
    workflow: str | None,
    revision: str | None,
    limit: int,
    endpoint: str | None,
    as_json: bool,
) -> None:
    """List the workflows of every project's latest revision (or of PROJECT's); with
    WORKFLOW, print its definition."""
    if workflow is not None:
        assert project is not None  # click fills PROJECT first
        _print_definition(project, workflow, revision, endpoint, as_json)
        return
    if revision is not None:
        raise click.UsageError("--revision goes with PROJECT WORKFLOW")
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


def _print_definition(
    project: str, workflow: str, revision: str | None, endpoint: str | None, as_json: bool
) -> None:
    """A workflow's definition, as Digdag's ``workflows PROJECT WORKFLOW`` prints it: where
    it comes from, then its config in YAML."""
    import yaml  # only here: listing commands start without it

    with api(endpoint) as client:
        found = client.get_project_workflow(project, workflow, revision)
    if as_json:
        print_json(found)
        return
    print_fields(found, False, ["project", "name", "revision", "timezone", "next_run_time"])
    click.echo("---")
    click.echo(yaml.safe_dump(found.get("config") or {}, sort_keys=False).rstrip())


@click.command("download", epilog=EXIT_CODES_HELP)
@click.argument("project")
@click.option("-r", "--revision", metavar="NAME", help="This revision (default: the latest).")
@click.option(
    "-o",
    "--output",
    type=click.Path(file_okay=False, path_type=Path),
    help="The directory to write the files in (default: ./PROJECT); it must be empty or new.",
)
@client_options
def download_command(
    project: str,
    revision: str | None,
    output: Path | None,
    endpoint: str | None,
    as_json: bool,
) -> None:
    """Download the files of PROJECT's latest (or a given) revision, as pushed."""
    target = output or Path(project)
    if target.exists() and any(target.iterdir()):
        exit_with(ExitCode.INVALID, f"error: {target} is not empty: nothing was written")
    with api(endpoint) as client:
        archive = client.download_archive(project, revision)
    names = unpack_archive(archive, target)
    if as_json:
        print_json({"project": project, "directory": str(target), "files": names})
        return
    click.echo(f"downloaded {len(names)} file(s) of {project} into {target}")


def unpack_archive(archive: bytes, target: Path) -> list[str]:
    """Write the regular files and folders of a tar.gz under ``target``; their names. A
    member that would leave ``target`` or is not a file or folder fails the command."""
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as bundle:
            members = bundle.getmembers()
            for member in members:
                if not (member.isfile() or member.isdir()):
                    exit_with(
                        ExitCode.FAILED, f"error: the archive holds {member.name!r}, not a file"
                    )
            target.mkdir(parents=True, exist_ok=True)
            bundle.extractall(target, filter="data")  # refuses paths that leave target
    except (tarfile.TarError, OSError) as exc:
        exit_with(ExitCode.FAILED, f"error: cannot unpack the archive into {target}: {exc}")
    return sorted(member.name for member in members if member.isfile())


def _next_run(workflow: dict[str, Any]) -> object:
    if workflow.get("paused"):
        return "paused"
    return workflow.get("next_run_time")
