"""``tickwork tasks``: the task tree of an attempt, through the API."""

from __future__ import annotations

import click

from services.cli.client import ATTEMPT_ID, api, client_options
from services.cli.errors import EXIT_CODES_HELP
from services.cli.output import field, print_items


@click.command("tasks", epilog=EXIT_CODES_HELP)
@click.argument("attempt_id", type=ATTEMPT_ID, metavar="ID")
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
