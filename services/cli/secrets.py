"""``tickwork secrets set|list|delete``: a project's secrets, on the store or through the API.

With ``--database-url`` (env ``TICKWORK_DATABASE_URL``) the commands work on the store
directly and ``set`` encrypts with ``TICKWORK_SECRET_KEY`` here; without it they ask the
API, which encrypts with its own key. A value is read from ``--value-file`` or standard
input, so that it does not land in the shell's history; ``--value`` exists for scripts
that have no other way, at that risk.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from services.cli.admin_api import ADMIN_EPILOG
from services.cli.client import api, client_options
from services.cli.output import field, print_items, print_json
from services.cli.params import ADMIN_DATABASE_OPTION
from shared.clock import utc_now
from shared.errors import TickworkError
from shared.secrets import MAX_SECRET_BYTES, SecretBox, check_secret_name


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
@ADMIN_DATABASE_OPTION
@client_options
def set_command(
    project: str,
    name: str,
    value_file: Path | None,
    value: str | None,
    database_url: str | None,
    endpoint: str | None,
    as_json: bool,
) -> None:
    """Set the secret NAME of PROJECT (replacing its value)."""
    secret = _value(value_file, value)
    if database_url:
        try:
            check_secret_name(name)
            encrypted = SecretBox.from_environment().encrypt(secret)
        except TickworkError as exc:
            raise click.ClickException(str(exc)) from None
        from services.cli.store_access import store_transaction
        from shared.store import secrets as secret_store

        with store_transaction(database_url) as conn:
            created = secret_store.set_secret(
                conn, project, name, encrypted, utc_now(), create_project=True
            )
        result = {"project": project, "name": name, "created": created}
    else:
        with api(endpoint) as client:
            result = client.set_secret(project, name, secret)
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
@ADMIN_DATABASE_OPTION
@client_options
def list_command(
    project: str, database_url: str | None, endpoint: str | None, as_json: bool
) -> None:
    """List the secrets of PROJECT: names and when they were set, never values."""
    if database_url:
        from services.cli.store_access import store_transaction
        from shared.store import secrets as secret_store

        with store_transaction(database_url, write=False) as conn:
            found = secret_store.list_secrets(conn, project)
        items = [
            {
                "name": s.name,
                "created_at": s.created_at.isoformat(),
                "updated_at": s.updated_at.isoformat(),
            }
            for s in found
        ]
    else:
        with api(endpoint) as client:
            items = client.list_secrets(project)
    columns = [("name", field("name")), ("updated", field("updated_at"))]
    print_items(items, as_json, columns)


@secrets_group.command("delete", epilog=ADMIN_EPILOG)
@click.argument("project")
@click.argument("name")
@ADMIN_DATABASE_OPTION
@client_options
def delete_command(
    project: str, name: str, database_url: str | None, endpoint: str | None, as_json: bool
) -> None:
    """Delete the secret NAME of PROJECT."""
    if database_url:
        from services.cli.store_access import store_transaction
        from shared.store import secrets as secret_store

        with store_transaction(database_url) as conn:
            secret_store.delete_secret(conn, project, name)
    else:
        with api(endpoint) as client:
            client.delete_secret(project, name)
    if as_json:
        print_json({"project": project, "name": name, "deleted": True})
    else:
        click.echo(f"{project}: secret {name} deleted")
