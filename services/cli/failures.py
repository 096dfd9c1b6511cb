"""Why an attempt failed, from the API's JSON: the tasks that failed, each with its error
message and the last lines of its latest log, shown the same way by every command::

    failed +wf+task: <error message>
      | <one of the last log lines, at most 10>

Only the end of a log is read (a page from near its end), however large the log is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from services.cli.output import text
from shared.errors import TickworkError
from shared.log_tail import TAIL_BYTES, last_lines

if TYPE_CHECKING:
    from services.cli.api_client import ApiClient

Json = dict[str, Any]

MAX_FAILURES = 10
"""Most failed tasks reported with their logs; the others are counted."""


@dataclass(frozen=True)
class Failure:
    """One failed task: its full name, its error message and the last lines of its log."""

    task: str
    message: str
    log_tail: list[str]

    def as_json(self) -> Json:
        """The failure as a JSON object."""
        return {"task": self.task, "message": self.message, "log_tail": self.log_tail}


@dataclass(frozen=True)
class FailureReport:
    """The failed tasks of an attempt that are reported, and how many others failed."""

    failures: list[Failure]
    not_shown: int = 0


def failure_lines(name: str, message: str, tail_lines: list[str]) -> list[str]:
    """How one failed task is shown: ``failed NAME: MESSAGE`` (further lines of the message
    indented), then its log lines, each after ``  | ``."""
    first, *more = message.splitlines() or [""]
    return [
        f"failed {name}: {first}",
        *(f"  {line}" for line in more),
        *(f"  | {line}" for line in tail_lines),
    ]


def error_message(task: Json) -> str:
    """The message of a task's error (``failed`` if it has none)."""
    error = task.get("error")
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])
    return "failed"


def failed_tasks(tasks: list[Json]) -> list[Json]:
    """The tasks in error that did not fail only because a child did: where to look."""
    failed_parents = {t.get("parent_id") for t in tasks if t.get("state") == "error"}
    return [t for t in tasks if t.get("state") == "error" and t.get("id") not in failed_parents]


def read_failure_report(client: ApiClient, attempt: Json) -> FailureReport:
    """What failed in ``attempt`` (an attempt's JSON): nothing unless it ended in error."""
    if attempt.get("state") != "error":
        return FailureReport([])
    attempt_id = str(attempt["id"])
    failed = failed_tasks(client.list_tasks(attempt_id))
    shown = failed[:MAX_FAILURES]
    failures = [
        Failure(
            str(task["full_name"]), error_message(task), read_log_tail(client, attempt_id, task)
        )
        for task in shown
    ]
    return FailureReport(failures, len(failed) - len(shown))


def read_log_tail(client: ApiClient, attempt_id: str, task: Json) -> list[str]:
    """The last lines of the latest log of ``task``; none if it has no log that can be read
    (a tail is an aid: the error message was already shown)."""
    try:
        files = client.list_log_files(attempt_id, str(task["full_name"]))
        runs = [f for f in files if str(f.get("task_id")) == str(task["id"])]
        if not runs:
            return []
        latest = max(runs, key=lambda f: (int(f.get("run") or 0), int(f["id"])))
        offset = max(0, int(latest.get("size_bytes") or 0) - TAIL_BYTES)
        page = client.read_log_page(attempt_id, str(latest["id"]), offset)
    except TickworkError:
        return []
    return last_lines(page.data[-TAIL_BYTES:], cut=offset > 0 or len(page.data) > TAIL_BYTES)


def echo_failure_report(report: FailureReport, attempt_id: str) -> None:
    """Print each reported failure, and a line counting the failed tasks not shown."""
    for failure in report.failures:
        for line in failure_lines(failure.task, failure.message, failure.log_tail):
            click.echo(line)
    if report.not_shown:
        click.echo(
            f"and {report.not_shown} more failed tasks (tickwork tasks {attempt_id} lists them)"
        )


def with_failures(attempt: Json, report: FailureReport) -> Json:
    """An attempt's JSON with a ``failures`` list (empty unless it ended in error)."""
    return {**attempt, "failures": [failure.as_json() for failure in report.failures]}


def running_lines(tasks: list[Json]) -> list[str]:
    """``running +wf+task (since T)`` for each operator task that is running now."""
    return [
        f"running {task['full_name']} (since {text(task.get('started_at'))})"
        for task in tasks
        if task.get("state") == "running" and not task.get("is_group")
    ]
