"""Why an attempt failed, from the API's JSON: the tasks that failed, each with its error
message and the last lines of its latest log, shown the same way by every command::

    failed +wf+task: <error message>
      | <one of the last log lines, at most 10>

The API chooses the failures and reads the end of their logs
(``GET /api/attempts/{id}/failures``); this module only prints them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import click

from tickwork.services.cli.output import text
from tickwork.shared.domain.states import AttemptState, TaskState
from tickwork.shared.json_types import Json

if TYPE_CHECKING:
    from tickwork.services.cli.api_client import ApiClient


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


def read_failure_report(client: ApiClient, attempt: Json) -> FailureReport:
    """What failed in ``attempt`` (an attempt's JSON), as the API's
    ``/api/attempts/{id}/failures`` says: nothing unless it ended in error."""
    if attempt.get("state") != AttemptState.ERROR:
        return FailureReport([])
    found = client.get_failures(str(attempt["id"]))
    failures = [
        Failure(
            str(item.get("task", "")),
            str(item.get("message") or "failed"),
            [str(line) for line in item.get("log_tail") or []],
        )
        for item in found.get("items") or []
    ]
    return FailureReport(failures, int(found.get("not_shown") or 0))


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
        if task.get("state") == TaskState.RUNNING and not task.get("is_group")
    ]
