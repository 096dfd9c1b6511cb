"""``tickwork triggers``: what starts workflows besides their schedules (another
workflow's success, a webhook), through the API.

- ``tickwork triggers [--project P]`` lists them: what each waits for, whether it is
  paused, how often it fired, the attempt it started last;
- ``tickwork triggers show ID`` adds its latest firings (what fired, when, what started);
- ``tickwork triggers pause ID`` / ``resume ID``.
"""

from __future__ import annotations

from typing import Any

import click

from tickwork.services.cli.client import api, client_options, no_database_url
from tickwork.services.cli.output import field, print_fields, print_items

COLUMNS = [
    ("id", field("id")),
    ("project", field("project")),
    ("workflow", field("workflow")),
    ("on", lambda t: t.get("upstream") or f"webhook {t.get('hook')}"),
    ("paused", lambda t: "yes" if t.get("paused") else ""),
    ("fired", field("fired_count")),
    ("last fired", field("last_fired_at")),
    ("last attempt", field("last_attempt_id")),
    ("error", field("last_error")),
]
FIELDS = ["id", "project", "workflow", "kind", "upstream", "hook", "paused", "fired_count"]


@click.group("triggers", invoke_without_command=True)
@click.option("--project", metavar="NAME", help="Only this project's.")
@no_database_url
@client_options
@click.pass_context
def triggers_group(
    ctx: click.Context, project: str | None, endpoint: str | None, as_json: bool
) -> None:
    """List the triggers (another workflow's success, a webhook); show, pause, resume one."""
    if ctx.invoked_subcommand is not None:
        return
    with api(endpoint) as client:
        items = client.list_triggers(project)
    print_items(items, as_json, COLUMNS)


@triggers_group.command("show")
@click.argument("trigger_id", metavar="ID")
@no_database_url
@client_options
def show_command(trigger_id: str, endpoint: str | None, as_json: bool) -> None:
    """Show trigger ID and its latest firings: what fired, when, what it started."""
    with api(endpoint) as client:
        found: dict[str, Any] = client.get_trigger(trigger_id)
    print_fields(found, as_json, [*FIELDS, "last_fired_at", "last_attempt_id", "last_error"])
    if not as_json:
        for firing in found.get("firings", []):
            click.echo(f"  {firing['fired_at']}  {firing['event']}  attempt {firing['attempt_id']}")


@triggers_group.command("pause")
@click.argument("trigger_id", metavar="ID")
@no_database_url
@client_options
def pause_command(trigger_id: str, endpoint: str | None, as_json: bool) -> None:
    """Pause trigger ID: nothing fires it until it is resumed."""
    with api(endpoint) as client:
        print_fields(client.pause_trigger(trigger_id), as_json, FIELDS)


@triggers_group.command("resume")
@click.argument("trigger_id", metavar="ID")
@no_database_url
@client_options
def resume_command(trigger_id: str, endpoint: str | None, as_json: bool) -> None:
    """Resume trigger ID."""
    with api(endpoint) as client:
        print_fields(client.resume_trigger(trigger_id), as_json, FIELDS)
