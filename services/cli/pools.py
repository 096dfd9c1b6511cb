"""``tickwork pools``: the pools every project's tasks share (``_pool: NAME``), through the
API.

- ``tickwork pools`` lists them: slots, those in use, the ready tasks waiting for one,
  and the names tasks give that no pool has (slots ``missing``);
- ``tickwork pools set NAME SLOTS [--description TEXT]`` creates a pool or changes its
  slots (an admin token without project globs);
- ``tickwork pools delete NAME`` removes one: its tasks wait until it is set again.
"""

from __future__ import annotations

from typing import Any

import click

from tickwork.services.cli.admin_api import ADMIN_EPILOG
from tickwork.services.cli.client import api, client_options, no_database_url
from tickwork.services.cli.output import field, print_fields, print_items, print_json
from tickwork.shared.domain.pools import MAX_SLOTS, POOL_NAME

COLUMNS = [
    ("pool", field("name")),
    ("slots", lambda p: "missing" if p.get("slots") is None else p["slots"]),
    ("used", field("used")),
    ("waiting", field("waiting")),
    ("description", field("description")),
]
FIELDS = ["name", "slots", "used", "waiting", "free", "description"]


class PoolName(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.2 on
    """A pool's name, checked before the API is asked, so that a bad one names the
    argument at fault (exit 2)."""

    name = "pool"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        """``value`` if it may name a pool; a usage error naming the argument otherwise."""
        if not POOL_NAME.fullmatch(str(value)):
            self.fail(
                f"{value!r} is not a pool name (a letter or digit, then up to 63 letters, "
                "digits, '_', '.' or '-')"
            )
        return str(value)


POOL = PoolName()


@click.group("pools", invoke_without_command=True, epilog=ADMIN_EPILOG)
@no_database_url
@client_options
@click.pass_context
def pools_group(ctx: click.Context, endpoint: str | None, as_json: bool) -> None:
    """List the pools tasks share (slots, used, waiting); set or delete one."""
    if ctx.invoked_subcommand is not None:
        return
    with api(endpoint) as client:
        items = client.list_pools()
    print_items(items, as_json, COLUMNS)


# "-1" would be read as an unknown option: taken as SLOTS instead, IntRange names it.
@pools_group.command("set", epilog=ADMIN_EPILOG, context_settings={"ignore_unknown_options": True})
@click.argument("name", type=POOL)
@click.argument("slots", type=click.IntRange(0, MAX_SLOTS))
@click.option(
    "--description",
    metavar="TEXT",
    help="What the pool guards (at most 500 characters; default: keep the one it has).",
)
@no_database_url
@client_options
def set_command(
    name: str, slots: int, description: str | None, endpoint: str | None, as_json: bool
) -> None:
    """Set pool NAME to SLOTS slots (created if there is none). Fewer slots than are in use
    take none back: no task of the pool starts until enough end."""
    with api(endpoint) as client:
        found = client.set_pool(name, slots, description)
    if as_json:
        print_json(found)
        return
    print_fields(found, False, FIELDS)


@pools_group.command("delete", epilog=ADMIN_EPILOG)
@click.argument("name", type=POOL)
@no_database_url
@client_options
def delete_command(name: str, endpoint: str | None, as_json: bool) -> None:
    """Delete pool NAME: its ready tasks wait until a pool of that name is set again."""
    with api(endpoint) as client:
        client.delete_pool(name)
    if as_json:
        print_json({"name": name, "deleted": True})
    else:
        click.echo(f"pool {name}: deleted")
