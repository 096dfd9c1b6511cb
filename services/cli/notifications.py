"""``tickwork notifications``: what the projects' notification rules sent, and a test send.

- ``tickwork notifications [--failed] [--project P] [--rule R]`` lists deliveries, newest
  first;
- ``tickwork notifications rules PROJECT`` lists a project's rules;
- ``tickwork notifications test RULE --project P`` sends a sample event through one rule
  and waits (at most ``--wait`` seconds) for the executor's notifier to send it: exit 0
  when it was sent, 1 when the send failed (the error is shown).
"""

from __future__ import annotations

import time
from typing import Any

import click

from tickwork.services.cli.client import api, client_options, limit_option, no_database_url
from tickwork.services.cli.errors import ExitCode, exit_with
from tickwork.services.cli.output import field, print_fields, print_items

POLL_SECONDS = 0.5
COLUMNS = [
    ("id", field("id")),
    ("created", field("created_at")),
    ("project", field("project")),
    ("rule", field("rule")),
    ("event", field("event")),
    ("attempt", field("attempt_id")),
    ("target", field("target")),
    ("state", field("state")),
    ("tries", field("tries")),
    ("error", field("last_error")),
]


@click.group("notifications", invoke_without_command=True)
@click.option("--failed", is_flag=True, help="Only deliveries whose last try failed.")
@click.option("--project", metavar="NAME", help="Only this project's.")
@click.option("--rule", metavar="NAME", help="Only this rule's.")
@limit_option
@no_database_url
@client_options
@click.pass_context
def notifications_group(
    ctx: click.Context,
    failed: bool,
    project: str | None,
    rule: str | None,
    limit: int,
    endpoint: str | None,
    as_json: bool,
) -> None:
    """List what the notification rules sent, newest first; test a rule."""
    if ctx.invoked_subcommand is not None:
        return
    with api(endpoint) as client:
        items = list(
            client.list_notifications(failed=failed, project=project, rule=rule, limit=limit)
        )
    print_items(items, as_json, COLUMNS)


@notifications_group.command("rules")
@click.argument("project")
@no_database_url
@client_options
def rules_command(project: str, endpoint: str | None, as_json: bool) -> None:
    """List PROJECT's notification rules (its notifications.yml, as last pushed)."""
    with api(endpoint) as client:
        items = client.list_notification_rules(project)
    columns = [
        ("name", field("name")),
        ("when", lambda item: ", ".join(item.get("when") or [])),
        ("workflows", lambda item: ", ".join(item.get("workflows") or []) or "*"),
        ("target", field("target")),
    ]
    print_items(items, as_json, columns)


@notifications_group.command("test")
@click.argument("rule")
@click.option("--project", metavar="NAME", required=True, help="The rule's project.")
@click.option(
    "--wait",
    type=click.FloatRange(0, 600),
    default=30.0,
    show_default=True,
    help="Seconds to wait for the send (0: do not wait).",
)
@no_database_url
@client_options
def test_command(rule: str, project: str, wait: float, endpoint: str | None, as_json: bool) -> None:
    """Send a sample event through RULE and show how the send went."""
    with api(endpoint) as client:
        delivery: dict[str, Any] = client.test_notification_rule(project, rule)
        deadline = time.monotonic() + wait
        while _settling(delivery) and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
            delivery = client.get_notification(str(delivery["id"]))
    print_fields(
        delivery, as_json, ["id", "rule", "target", "state", "tries", "last_status", "last_error"]
    )
    if delivery.get("state") != "sent" and wait:
        if _settling(delivery) and not delivery.get("last_error"):
            exit_with(
                ExitCode.FAILED,
                f"error: not sent within {wait:g}s: is an executor (or tickwork standalone) "
                "running?",
            )
        exit_with(ExitCode.FAILED, f"error: the send failed: {delivery.get('last_error')}")


def _settling(delivery: dict[str, Any]) -> bool:
    """Whether the first send has not happened yet."""
    return delivery.get("state") in ("pending", "sending") and not delivery.get("tries")
