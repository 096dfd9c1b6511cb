"""``tickwork log``: the logs of an attempt's tasks through the API, every byte of every
run's log, or (``-f``) their text as it is written.

Every run of a task has a log from the moment it was handed to an agent: a run still
going prints what it wrote so far, a killed one what it wrote before it was stopped. Each
log is read page after page (the API sends at most 16 MiB a request) until its end. A
log that cannot be read (the retention removed it) is named on stderr and the others are
still printed; a log the agent cut (its head and tail kept) gets a note on stderr besides
the marker line it holds, and so does one with bytes that never reached the store.
"""

from __future__ import annotations

import codecs
import difflib
import sys
from typing import TYPE_CHECKING, Any

import click

from tickwork.services.cli.client import ATTEMPT_ID, api, client_options
from tickwork.services.cli.errors import EXIT_CODES_HELP, ExitCode
from tickwork.services.cli.output import print_json
from tickwork.shared.errors import NotFound

if TYPE_CHECKING:
    from tickwork.services.cli.api_client import ApiClient

LOG_EXIT_CODES_HELP = (
    EXIT_CODES_HELP + "\n\b\n"
    "A +TASK that names no task of the attempt is not found (3); a listed log file that\n"
    "is missing is named on stderr and the others are printed, the status is then 3."
)


@click.command("log", epilog=LOG_EXIT_CODES_HELP)
@click.argument("attempt_id", type=ATTEMPT_ID, metavar="ID")
@click.argument("task", required=False, metavar="[+TASK]")
@click.option(
    "-f",
    "--follow",
    is_flag=True,
    help="Keep printing until the attempt ends, each task's lines under a '--- +TASK' line.",
)
@client_options
def log_command(
    attempt_id: str, task: str | None, follow: bool, endpoint: str | None, as_json: bool
) -> None:
    """Print the log of an attempt (of the tasks under +TASK only, if given).

    Every run of its tasks is printed, those still going and those killed too."""
    missing = 0
    with api(endpoint) as client:
        if follow:
            if task:
                check_task_prefix(client, attempt_id, task)
            _follow(client, attempt_id, task, as_json)
            return
        files = client.list_log_files(attempt_id, task)
        if task and not files:
            check_task_prefix(client, attempt_id, task)
        for log_file in files:
            if not _print_file(client, attempt_id, log_file, as_json, titled=len(files) > 1):
                missing += 1
    if missing:
        sys.exit(ExitCode.NOT_FOUND)


def check_task_prefix(client: ApiClient, attempt_id: str, prefix: str) -> None:
    """NotFound, with the closest task names, if no task of the attempt starts with
    ``prefix``."""
    names = [str(t["full_name"]) for t in client.list_tasks(attempt_id)]
    if any(name.startswith(prefix) for name in names):
        return
    message = f"attempt {attempt_id} has no task {prefix}"
    # Not the groups the prefix already names, which the user knows of.
    others = [name for name in names if not prefix.startswith(name)]
    close = difflib.get_close_matches(prefix, others, n=1)
    if close:
        message += f"; did you mean {close[0]}?"
    raise NotFound(message)


def _follow(client: ApiClient, attempt_id: str, prefix: str | None, as_json: bool) -> None:
    """Print the attempt's log text as it comes, a ``--- +TASK`` line before the lines of
    each task whenever the task changes (runs going at once interleave)."""
    shown: str | None = None
    at_line_start = True
    for chunk in client.follow_log(attempt_id):
        if prefix and not (chunk.task or "").startswith(prefix):
            continue
        if as_json:
            print_json({"task": chunk.task, "text": chunk.text, "next_offset": chunk.next_offset})
            continue
        if chunk.task != shown:
            if not at_line_start:
                click.echo()
            click.echo(f"--- {chunk.task or '(unknown task)'}")
            shown = chunk.task
        click.echo(chunk.text, nl=False)
        at_line_start = chunk.text.endswith("\n")
    if not at_line_start:
        click.echo()


def _print_file(
    client: ApiClient, attempt_id: str, log_file: dict[str, Any], as_json: bool, *, titled: bool
) -> bool:
    """Print one log file (JSON: one object with its ``content``); False if it is missing."""
    name = str(log_file.get("task") or log_file.get("path"))
    if titled and not as_json:
        click.echo(f"--- {name}")
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    parts: list[str] = []
    last = ""
    try:
        for data in client.read_log(attempt_id, str(log_file["id"])):
            text = decoder.decode(data)
            if as_json:
                parts.append(text)
            elif text:
                click.echo(text, nl=False)
                last = text[-1]
    except NotFound as exc:
        where = f"log file {log_file['id']} of {name} ({log_file.get('path')})"
        click.echo(f"warning: {where} is missing: {exc}", err=True)
        return False
    rest = decoder.decode(b"", final=True)
    if as_json:
        print_json({**log_file, "content": "".join([*parts, rest])})
    elif rest or (last and last != "\n"):
        click.echo(rest)
    missing = int(log_file.get("missing_bytes") or 0)
    if missing and not as_json:
        click.echo(
            f"note: {name}: {missing:,} bytes of this log never reached the store "
            "(printed as NUL bytes where they belong)",
            err=True,
        )
    cut = int(log_file.get("truncated_bytes") or 0)
    if cut and not as_json:
        click.echo(
            f"note: {name}: {cut:,} bytes were cut from the middle of this log "
            "(the agent keeps its head and its tail)",
            err=True,
        )
    return True
