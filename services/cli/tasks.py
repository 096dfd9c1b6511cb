"""``tickwork tasks``: the task tree of an attempt, through the API.

Each task is shown under its parent, indented by its depth, with its own name, its state
(with the pool a ready one waits for), when it first started, how long it took, how many
times it was retried, and its error while it is in error (a task that succeeded on a
retry shows none).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import click

from tickwork.services.cli.client import ATTEMPT_ID, api, client_options
from tickwork.services.cli.errors import EXIT_CODES_HELP
from tickwork.services.cli.failures import error_message
from tickwork.services.cli.output import print_json, text
from tickwork.shared.display import duration_text
from tickwork.shared.domain.states import CURRENT_ERROR_STATES
from tickwork.shared.json_types import Json

INDENT = "  "
"""What each level of the tree adds before a task's name."""


@click.command("tasks", epilog=EXIT_CODES_HELP)
@click.argument("attempt_id", type=ATTEMPT_ID, metavar="ID")
@client_options
def tasks_command(attempt_id: str, endpoint: str | None, as_json: bool) -> None:
    """Show the task tree of an attempt.

    Each task is shown under its parent with its state, first start, duration, retries,
    and its error while it is in error.
    """
    with api(endpoint) as client:
        tasks = client.list_tasks(attempt_id)
    if as_json:
        for task in tasks:
            print_json(task)
        return
    print_tree(tasks)


def tree_order(tasks: list[Json]) -> Iterator[tuple[int, Json]]:
    """``(depth, task)`` for every task, each right after its parent, siblings in their
    order; a task whose parent is not listed is shown as a root."""
    ids = {task.get("id") for task in tasks}
    children: dict[object, list[Json]] = {}
    for task in tasks:
        parent = task.get("parent_id")
        children.setdefault(parent if parent in ids else None, []).append(task)
    for siblings in children.values():
        siblings.sort(key=lambda t: (int(t.get("position") or 0), int(t.get("id") or 0)))
    stack = [(0, task) for task in reversed(children.get(None, []))]
    while stack:
        depth, task = stack.pop()
        yield depth, task
        stack.extend((depth + 1, child) for child in reversed(children.get(task.get("id"), [])))


def current_error(task: Json) -> str | None:
    """The task's error message if it is in error now; None otherwise."""
    if task.get("state") not in CURRENT_ERROR_STATES:
        return None
    return error_message(task).splitlines()[0] if task.get("error") else None


def state_text(task: Json) -> str:
    """The task's state; for a ready task of a pool, the pool it waits for."""
    state = text(task.get("state"))
    pool = task.get("pool")
    return f"{state} (waiting for pool {pool})" if state == "ready" and pool else state


def task_row(depth: int, task: Json) -> list[str]:
    """The cells of one task's line of the tree."""
    name = task.get("name") or task.get("full_name")
    return [
        text(task.get("id")),
        INDENT * depth + text(name),
        state_text(task),
        text(task.get("started_at")),
        duration_text(task.get("duration_seconds")),
        text(task.get("retry_count") or 0),
        text(current_error(task)),
    ]


def print_tree(tasks: list[Json]) -> None:
    """The tasks as a table whose task column is the indented tree."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table("id", "task", "state", "started", "duration", "retries", "error")
    for column in table.columns[:-1]:
        column.no_wrap = True
    table.columns[-1].overflow = "fold"
    for depth, task in tree_order(tasks):
        # Text, not markup: a name or a message may hold brackets.
        table.add_row(*(Text(cell) for cell in task_row(depth, task)))
    # Off a terminal nothing is cut: the table is as wide as what it holds.
    Console(width=None if sys.stdout.isatty() else 100_000).print(table)
