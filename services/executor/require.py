"""The ``require>`` operator, run by the executor: start or wait for another workflow's session.

A ``require>`` task finds (or starts) the session of the required workflow with the same
session time, then waits for its latest attempt without holding an agent or a thread: the
task waits DELAYED and is looked at again after 1, 2, 4 … 10 seconds (Digdag's polling),
or at once when the executor sees the required attempt end.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import Connection

from tickwork.services.executor.graph import TaskGraph
from tickwork.shared.dispatch.messages import TaskMessage
from tickwork.shared.domain.control import BadControl
from tickwork.shared.domain.numbers import whole_number
from tickwork.shared.domain.states import AttemptState, TaskState
from tickwork.shared.domain.workflow import WorkflowDefinition
from tickwork.shared.dsl.parser import parse_workflow_file
from tickwork.shared.errors import Conflict, TickworkError
from tickwork.shared.store import tasks as task_store
from tickwork.shared.store.requires import (
    AWAITED_KEY,
    ProjectRef,
    attempts_awaited_by,
    find_project,
    latest_definition_id,
    start_local_attempt,
    store_local_definition,
    wake_tasks_requiring,
)
from tickwork.shared.store.sessions import AttemptRow, get_attempt, list_session_attempts
from tickwork.shared.store.starts import RetryMode, StartResult, retry_attempt, start_attempt
from tickwork.shared.store.tasks import TaskRow

log = logging.getLogger(__name__)

MAX_POLL_SECONDS = 10.0
"""The longest wait between two looks at the required attempt (Digdag's cap)."""

MAX_CYCLE_DEPTH = 100
"""How far a chain of ``require>`` waits is followed when looking for a cycle."""


class RequireError(BadControl):
    """A ``require>`` task cannot go on; the message says why (the task fails with it)."""


class RerunOn(StrEnum):
    """When ``require>`` runs a session that already has an attempt again."""

    NONE = "none"  # never: use the latest attempt, whatever its state
    FAILED = "failed"  # when the latest attempt did not succeed
    ALL = "all"  # always, even when it succeeded


@dataclass(frozen=True)
class RequireOptions:
    """A ``require>`` task's rendered command and options."""

    workflow: str
    project_id: int | None = None
    project_name: str | None = None
    session_time: datetime | None = None
    params: dict[str, Any] | None = None
    rerun_on: RerunOn = RerunOn.NONE
    ignore_failure: bool = False
    retry_attempt_name: str | None = None

    @classmethod
    def parse(cls, command: Any, params: dict[str, Any]) -> RequireOptions:
        """The options of a task from its command and params; RequireError if one is bad."""
        if not isinstance(command, str) or not command.strip():
            raise RequireError(f"'require>' needs a workflow name, got {command!r}")
        rerun_on = str(params.get("rerun_on", "none")).strip().lower()
        if rerun_on not in {r.value for r in RerunOn}:
            raise RequireError(f"'rerun_on' must be none, failed or all, got {rerun_on!r}")
        extra = params.get("params")
        if extra is not None and not isinstance(extra, dict):
            raise RequireError(f"'params' must be a mapping, got {extra!r}")
        return cls(
            workflow=command.strip(),
            project_id=_project_id(params.get("project_id")),
            project_name=_optional_text(params, "project_name"),
            session_time=_session_time(params.get("session_time")),
            params=extra,
            rerun_on=RerunOn(rerun_on),
            ignore_failure=_flag(params.get("ignore_failure", False), "ignore_failure"),
            retry_attempt_name=_optional_text(params, "retry_attempt_name"),
        )


def _project_id(value: Any) -> int | None:
    if value is None:
        return None
    number = whole_number(value)
    if number is not None:
        return number
    raise RequireError(f"'project_id' must be a number, got {value!r}")


def _optional_text(params: dict[str, Any], key: str) -> str | None:
    value = params.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise RequireError(f"'{key}' must be a non-empty string, got {value!r}")
    return value.strip()


def _session_time(value: Any) -> datetime | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        raise RequireError(
            f"'session_time' must be an ISO 8601 time (2024-05-01T00:00:00+00:00), got {value!r}"
        ) from None


def _flag(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise RequireError(f"'{key}' must be true or false, got {value!r}")


# -- running -----------------------------------------------------------------------------


def run_require(
    conn: Connection,
    graph: TaskGraph,
    task: TaskRow,
    message: TaskMessage,
    stored: dict[str, Any] | None,
) -> int:
    """Start or look at the attempt a READY ``require>`` task requires, and succeed, fail
    or wait DELAYED accordingly; the required attempt's id (None if there is none).

    Raises RequireError (a BadControl: the task fails with its message)."""
    options = RequireOptions.parse(message.command, message.params)
    waiting = _waiting_on(task)
    if waiting is None:
        required_id, polls = _start_or_find(conn, task, options, graph.now), 0
    else:
        required_id, polls = waiting[0], waiting[1] + 1
    required = get_attempt(conn, required_id)
    if not required.state.is_done:
        _hold(graph, task, required_id, polls)
    elif required.state is AttemptState.SUCCESS or options.ignore_failure:
        graph.succeed_operator(task, {}, params=stored)
    else:
        graph.fail(task, {"message": _failure(required)})
    return required_id


def _failure(required: AttemptRow) -> str:
    return (
        f"required workflow {required.workflow_name} ended {required.state.value} "
        f"(session {required.session_id}, attempt {required.id})"
    )


def _waiting_on(task: TaskRow) -> tuple[int, int] | None:
    """The attempt a task waits on and how often it looked, if it waits in this try."""
    result = task.result or {}
    awaited = result.get(AWAITED_KEY)
    if awaited is None or result.get("require_retry") != task.retry_count:
        return None  # not started yet, or a retry of the task: start over
    return int(awaited), int(result.get("require_polls", 0))


def _hold(graph: TaskGraph, task: TaskRow, required_id: int, polls: int) -> None:
    """The task waits DELAYED, holding nothing, until its next look at the attempt."""
    until = graph.now + timedelta(seconds=min(2.0**polls, MAX_POLL_SECONDS))
    result = {AWAITED_KEY: required_id, "require_retry": task.retry_count, "require_polls": polls}
    if task_store.update_task(
        graph.conn,
        task.id,
        (TaskState.READY,),
        state=TaskState.DELAYED,
        not_before=until,
        result=result,
        updated_at=graph.now,
    ):
        graph.wake_at(until)
        log.debug("task %s waits for attempt_id=%d", task.full_name, required_id)


def wake_requiring_tasks(conn: Connection, graph: TaskGraph, ended: Collection[int]) -> None:
    """``require>`` tasks waiting on attempts that just ended look at them now.

    They may be in partitions other executors hold: only their due time moves to now,
    which the holder's next rescan (within a second) acts on."""
    if ended and wake_tasks_requiring(conn, ended, graph.now):
        graph.wake_at(graph.now)


# -- finding or starting the required attempt --------------------------------------------


def _start_or_find(conn: Connection, task: TaskRow, options: RequireOptions, now: datetime) -> int:
    """The attempt to wait on: a new session's, the latest one, or a new one (``rerun_on``)."""
    own = get_attempt(conn, task.attempt_id)
    try:
        # `project_id` is also a built-in variable (the task's own project): a name wins.
        if options.project_name is not None:
            project = find_project(conn, project_id=None, name=options.project_name)
        else:
            project = find_project(conn, project_id=options.project_id or own.project_id, name=None)
        session_time = options.session_time or own.session_time
        _refuse_itself(own, project, options.workflow, session_time)
        local = _local_definition(project, options.workflow)
        start = _start(conn, project, local, options, session_time, now)
    except TickworkError as exc:
        raise RequireError(f"'require>' {exc}") from None
    if start.created:
        log.info(
            "task %s started workflow %s attempt_id=%d",
            task.full_name,
            options.workflow,
            start.attempt_id,
        )
        return start.attempt_id
    latest = get_attempt(conn, start.attempt_id)
    if not latest.state.is_done:
        _refuse_cycle(conn, own, latest)
        return latest.id  # running: wait for it, whatever rerun_on says (as Digdag does)
    if options.rerun_on is RerunOn.NONE:
        return latest.id
    if options.rerun_on is RerunOn.FAILED and latest.state is AttemptState.SUCCESS:
        return latest.id
    definition_id = (
        store_local_definition(conn, project.id, local, now)
        if local is not None
        else latest_definition_id(conn, project.id, options.workflow)
    )
    return _rerun(conn, latest, options, definition_id, now)


def _start(
    conn: Connection,
    project: ProjectRef,
    local: WorkflowDefinition | None,
    options: RequireOptions,
    session_time: datetime,
    now: datetime,
) -> StartResult:
    if local is not None:
        return start_local_attempt(
            conn,
            project=project,
            definition=local,
            session_time=session_time,
            params=options.params or {},
            now=now,
        )
    return start_attempt(
        conn,
        project=project.name,
        workflow=options.workflow,
        session_time=session_time,
        params=options.params or {},
        idempotency_key=None,
        now=now,
    )


def _local_definition(project: ProjectRef, workflow: str) -> WorkflowDefinition | None:
    """For a project run from a directory, the workflow as its file there says now (its
    latest revision); None for a pushed project. Raises InvalidInput for a bad file."""
    if project.source_dir is None:
        return None
    directory = Path(project.source_dir)
    path = directory / f"{workflow}.dig"
    if not path.is_file():
        return None  # then the stored revisions must have it, or start_attempt says no
    return parse_workflow_file(path, directory)


def _refuse_itself(
    own: AttemptRow, project: ProjectRef, workflow: str, session_time: datetime
) -> None:
    if session_time.tzinfo is None:
        session_time = session_time.replace(tzinfo=ZoneInfo(own.timezone))
    own_session = (own.project_id, own.workflow_name, own.session_time)
    if (project.id, workflow, session_time) == own_session:
        raise RequireError(
            f"'require>' of {workflow} with its own session time {session_time.isoformat()} "
            "would wait for itself"
        )


def _refuse_cycle(conn: Connection, own: AttemptRow, required: AttemptRow) -> None:
    """RequireError if the required attempt waits, through ``require>`` tasks, on ``own``."""
    seen: set[int] = set()
    frontier = {required.id}
    for _ in range(MAX_CYCLE_DEPTH):
        if own.id in frontier:
            raise RequireError(
                f"'require>' cycle: {required.workflow_name} (attempt {required.id}) waits "
                f"for {own.workflow_name} (attempt {own.id}) to end"
            )
        seen |= frontier
        frontier = attempts_awaited_by(conn, frontier) - seen
        if not frontier:
            return


def _rerun(
    conn: Connection,
    latest: AttemptRow,
    options: RequireOptions,
    definition_id: int | None,
    now: datetime,
) -> int:
    """A new attempt of the session of ``latest`` (done), or the one named
    ``retry_attempt_name`` if the session has it already."""
    name = options.retry_attempt_name
    if name is not None:
        for attempt in list_session_attempts(conn, latest.session_id):
            if attempt.name == name:
                return attempt.id
    try:
        return retry_attempt(
            conn,
            latest.id,
            mode=RetryMode.ALL,
            from_task=None,
            params=options.params,
            now=now,
            name=name,
            workflow_definition_id=definition_id,
        )
    except Conflict:  # another attempt started meanwhile: wait for that one
        return list_session_attempts(conn, latest.session_id)[-1].id
