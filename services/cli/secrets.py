"""``tickwork secrets set|list|delete``: a project's secrets, through the API.

The API encrypts a value with its own ``TICKWORK_SECRET_KEY``. A value is read from
``--value-file`` or standard input, so that it does not land in the shell's history;
``--value`` exists for scripts that have no other way, at that risk.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tickwork.services.cli.admin_api import ADMIN_EPILOG
from tickwork.services.cli.client import api, client_options, no_database_url
from tickwork.services.cli.output import field, print_items, print_json
from tickwork.shared.errors import NotFound
from tickwork.shared.secrets import MAX_SECRET_BYTES


@click.group("secrets", epilog=ADMIN_EPILOG)
def secrets_group() -> None:
    """Set, list and delete a project's secrets (values are never shown)."""


@secrets_group.command("set", epilog=ADMIN_EPILOG)
@click.argument("project")
@click.argument("name")
@click.option(
    "--value-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Read the value from this file ('-': standard input, the default).",
)
@click.option("--value", help="The value itself (it stays in the shell's history: avoid).")
@click.option(
    "--create-project",
    is_flag=True,
    help="Create PROJECT, without workflows, if it does not exist (a local project that "
    "has not run yet gets its secrets first).",
)
@no_database_url
@client_options
def set_command(
    project: str,
    name: str,
    value_file: Path | None,
    value: str | None,
    create_project: bool,
    endpoint: str | None,
    as_json: bool,
) -> None:
    """Set the secret NAME of PROJECT (replacing its value)."""
    secret = _value(value_file, value)
    with api(endpoint) as client:
        try:
            result = client.set_secret(project, name, secret, create_project=create_project)
        except NotFound as exc:
            raise NotFound(f"{exc} (--create-project creates it)") from None
    if as_json:
        print_json(result)
    else:
        click.echo(f"{project}: secret {name} {'set' if result.get('created') else 'updated'}")


def _value(value_file: Path | None, value: str | None) -> str:
    if value is not None and value_file is not None:
        raise click.UsageError("give either --value or --value-file, not both")
    if value is not None:
        text = value
    elif value_file is not None and str(value_file) != "-":
        text = value_file.read_text(encoding="utf-8")
    else:
        if sys.stdin.isatty():
            click.echo("value (end with Ctrl-D):", err=True)
        text = sys.stdin.read()
    # A file or a pipe ends with one newline that is not part of the value.
    text = text[:-1] if value is None and text.endswith("\n") else text
    if len(text.encode("utf-8")) > MAX_SECRET_BYTES:
        raise click.UsageError(f"a secret holds at most {MAX_SECRET_BYTES} bytes")
    return text


@secrets_group.command("list", epilog=ADMIN_EPILOG)
@click.argument("project")
@no_database_url
@client_options
def list_command(project: str, endpoint: str | None, as_json: bool) -> None:
    """List the secrets of PROJECT: names and when they were set, never values."""
    with api(endpoint) as client:
        items = client.list_secrets(project)
    columns = [("name", field("name")), ("updated", field("updated_at"))]
    print_items(items, as_json, columns)


@secrets_group.command("delete", epilog=ADMIN_EPILOG)
@click.argument("project")
@click.argument("name")
@no_database_url
@client_options
def delete_command(project: str, name: str, endpoint: str | None, as_json: bool) -> None:
    """Delete the secret NAME of PROJECT."""
    with api(endpoint) as client:
        client.delete_secret(project, name)
    if as_json:
        print_json({"project": project, "name": name, "deleted": True})
    else:
        click.echo(f"{project}: secret {name} deleted")
