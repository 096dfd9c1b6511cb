"""``tickwork tokens create|list|revoke``, ``tickwork whoami`` and ``tickwork audit``:
named tokens of the store and who did what with them, through the API.

A token's secret is printed once, by ``create``, and kept nowhere (the store holds its
SHA-256). Only an admin token may manage tokens; any token may ask ``whoami``.
"""

from __future__ import annotations

from typing import Any

import click

from tickwork.services.cli.admin_api import ADMIN_EPILOG
from tickwork.services.cli.client import api, client_options, limit_option, no_database_url
from tickwork.services.cli.output import field, print_fields, print_items, print_json

ROLES = ("read", "operate", "admin")


def _projects(item: dict[str, Any]) -> str:
    """A token's project globs in a cell: ``*`` (every project) when it has none."""
    globs = item.get("projects") or []
    return " ".join(str(glob) for glob in globs) if globs else "*"


@click.group("tokens", epilog=ADMIN_EPILOG)
def tokens_group() -> None:
    """Create, list and revoke named API tokens (an admin token's work)."""


@tokens_group.command("create", epilog=ADMIN_EPILOG)
@click.argument("name")
@click.option(
    "--role",
    type=click.Choice(ROLES),
    required=True,
    help="read: see; operate: also start, retry, kill and steer schedules; admin: everything.",
)
@click.option(
    "--project",
    "projects",
    metavar="GLOB",
    multiple=True,
    help="Limit the token to the projects this glob matches, such as data-* (repeatable; "
    "default: every project).",
)
@click.option(
    "--expires",
    metavar="DURATION",
    help="How long the token lasts, such as 90d or 12h (default: until revoked).",
)
@no_database_url
@client_options
def create_command(
    name: str,
    role: str,
    projects: tuple[str, ...],
    expires: str | None,
    endpoint: str | None,
    as_json: bool,
) -> None:
    """Create the token NAME and print its secret, this once."""
    with api(endpoint) as client:
        created = client.create_token(name, role, expires, projects)
    if as_json:
        print_json(created)
        return
    click.echo(created["secret"])
    expiry = f", expires {created['expires_at']}" if created.get("expires_at") else ""
    scope = f", projects {' '.join(projects)}" if projects else ""
    click.echo(
        f"token {name} ({role}{scope}{expiry}) created: the line above is its secret, shown only "
        "now; give it to its holder as TICKWORK_API_TOKEN",
        err=True,
    )


@tokens_group.command("list", epilog=ADMIN_EPILOG)
@no_database_url
@client_options
def list_command(endpoint: str | None, as_json: bool) -> None:
    """List the tokens of the store: name, role, projects, created, expires, last used,
    revoked."""
    with api(endpoint) as client:
        items = client.list_tokens()
    columns = [
        ("name", field("name")),
        ("role", field("role")),
        ("projects", _projects),
        ("created", field("created_at")),
        ("by", field("created_by")),
        ("expires", field("expires_at")),
        ("last used", field("last_used_at")),
        ("revoked", field("revoked_at")),
    ]
    print_items(items, as_json, columns)


@tokens_group.command("revoke", epilog=ADMIN_EPILOG)
@click.argument("name")
@no_database_url
@client_options
def revoke_command(name: str, endpoint: str | None, as_json: bool) -> None:
    """Revoke the token NAME (refused within a second on every API replica) and its UI sessions."""
    with api(endpoint) as client:
        revoked = client.revoke_token(name)
    if as_json:
        print_json(revoked)
    else:
        click.echo(f"token {name} revoked")


@click.command("whoami")
@no_database_url
@client_options
def whoami_command(endpoint: str | None, as_json: bool) -> None:
    """Show the name, role and projects of the token this command sends."""
    with api(endpoint) as client:
        found = client.whoami()
    if not as_json:
        found = {**found, "projects": _projects(found)}
    print_fields(found, as_json, ["name", "role", "projects", "source", "expires_at"])


@click.command("audit", epilog=ADMIN_EPILOG)
@click.option("--since", metavar="TIME", help="Events at or after this time (ISO 8601).")
@click.option("--until", metavar="TIME", help="Events before this time (ISO 8601).")
@click.option("--actor", metavar="NAME", help="Only this token's (env:admin, a token name).")
@click.option("--action", metavar="ACTION", help="Only this action (attempt.kill, ...).")
@click.option("--project", metavar="NAME", help="Only this project's.")
@limit_option
@no_database_url
@client_options
def audit_command(
    since: str | None,
    until: str | None,
    actor: str | None,
    action: str | None,
    project: str | None,
    limit: int,
    endpoint: str | None,
    as_json: bool,
) -> None:
    """List the audit log, newest first: who changed what, from where, and the outcome."""
    with api(endpoint) as client:
        items = list(
            client.list_audit(
                since=since,
                until=until,
                actor=actor,
                action=action,
                project=project,
                limit=limit,
            )
        )
    columns = [
        ("at", field("at")),
        ("actor", field("actor")),
        ("action", field("action")),
        ("target", field("target")),
        ("project", field("project")),
        ("outcome", field("outcome")),
        ("from", field("client_address")),
    ]
    print_items(items, as_json, columns)
