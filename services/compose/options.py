"""Options shared by the commands that work on the store itself (the servers and ``db``)."""

from __future__ import annotations

import click

DATABASE_URL_OPTION = click.option(
    "--database-url",
    envvar="TICKWORK_DATABASE_URL",
    required=True,
    help="The store (env TICKWORK_DATABASE_URL).",
)
