"""Reads of one attempt: the attempt, its tasks with the state a page shows for each, its
failures with the end of their logs, and one task with its values and its runs' logs.

The REST routes (routes/attempts.py, routes/logs.py) and the attempt page
(ui/attempt.py) both read through these functions; the CLI renders the REST JSON.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import Connection

from tickwork.shared.domain.states import TERMINAL_TASK_STATES, AttemptState, TaskState
from tickwork.shared.errors import NotFound
from tickwork.shared.log_tail import TAIL_BYTES, last_lines
from tickwork.shared.secrets import Masker, SecretBox, SecretKeyError
from tickwork.shared.store import history
from tickwork.shared.store import logs as log_store
from tickwork.shared.store import secrets as secret_store
from tickwork.shared.store.history import AttemptView, TaskSummary
from tickwork.shared.store.logs import RunLog
from tickwork.shared.store.tasks import find_task

MAX_FAILURES = 10
"""Most failed tasks reported with the end of their logs; the others are counted."""

ACTIVE_ORDER = (
    TaskState.RUNNING,
    TaskState.RETRY_WAITING,
    TaskState.QUEUED,
    TaskState.READY,
    TaskState.DELAYED,
)
"""The states a group that has not ended shows for its children, the first found winning:
a group whose child runs shows ``running``, not ``planned``."""


TaskView = TaskSummary
"""One task of an attempt as its page shows it, its ``display_state`` set by
:func:`with_display_states`."""


@dataclass(frozen=True)
class FailureView:
    """A task that failed (not only because a child did), its message, the log of its
    latest run (None without one) and that log's last lines."""

    task: str
    task_id: int
    message: str
    log_tail: list[str]
    log: RunLog | None = None


@dataclass(frozen=True)
class Failures:
    """The failures reported (at most :data:`MAX_FAILURES`) and how many more failed."""

    items: list[FailureView]
    not_shown: int


@dataclass(frozen=True)
class AttemptTasks:
    """An attempt and its tasks in creation order."""

    attempt: AttemptView
    tasks: list[TaskView]


@dataclass(frozen=True)
class TaskDetail:
    """One task with what it was given and what it set, secrets masked: ``params`` (visible
    when it started), ``stored`` (the ``${...}`` values it stored for the tasks after it),
    ``exported`` (its ``_export``), and the logs of its runs, oldest first."""

    id: int
    full_name: str
    state: str
    is_group: bool
    error: dict[str, Any] | None
    started_at: datetime | None
    finished_at: datetime | None
    params: dict[str, Any]
    stored: dict[str, Any]
    exported: dict[str, Any]
    runs: list[RunLog]


class _StatedTask(Protocol):
    @property
    def id(self) -> int: ...
    @property
    def parent_id(self) -> int | None: ...
    @property
    def state(self) -> str: ...


def display_states(tasks: Sequence[_StatedTask]) -> dict[int, str]:
    """The state shown for each task: its own, or for a group that has not ended the most
    active state of its descendants (tasks come parents first: children are seen after)."""
    shown = {task.id: str(task.state) for task in tasks}
    rank: dict[str, int] = {state: place for place, state in enumerate(ACTIVE_ORDER)}
    parents = {task.id: task.parent_id for task in tasks}
    for task in reversed(tasks):  # children before their parents
        parent = parents.get(task.id)
        if parent is None or parent not in shown:
            continue
        mine, theirs = shown[task.id], shown[parent]
        if theirs in TERMINAL_TASK_STATES or mine not in rank:
            continue
        if theirs not in rank or rank[mine] < rank[theirs]:
            shown[parent] = mine
    return shown


def with_display_states(tasks: list[TaskSummary]) -> list[TaskView]:
    """``tasks`` as :class:`TaskView` records."""
    shown = display_states(tasks)
    return [task._replace(display_state=shown[task.id]) for task in tasks]


def failed_tasks(tasks: list[TaskView]) -> list[TaskView]:
    """The tasks in error that did not fail only because a child did: where to look."""
    failed_parents = {t.parent_id for t in tasks if t.state == TaskState.ERROR}
    return [t for t in tasks if t.state == TaskState.ERROR and t.id not in failed_parents]


def latest_run(logs: list[RunLog], task_id: int) -> RunLog | None:
    """The log of a task's latest run: the highest lease token (a fencing token grows
    with each run)."""
    runs = [log for log in logs if log.task_id == task_id]
    return max(runs, key=lambda log: (log.lease_token, log.id)) if runs else None


def read_log_tail(conn: Connection, log: RunLog, limit: int) -> tuple[bytes, int]:
    """The last ``limit`` bytes of a run's log and how many bytes come before them; a
    line saying so for a log the retention removed."""
    if log.pruned_at is not None:
        return f"[the log retention removed this log on {log.pruned_at:%Y-%m-%d}]\n".encode(), 0
    return log_store.read_log_tail(conn, log, limit)


def tail_lines(conn: Connection, log: RunLog | None) -> list[str]:
    """The last lines of a run's log (see :mod:`tickwork.shared.log_tail`); none without a log."""
    if log is None:
        return []
    data, before = read_log_tail(conn, log, TAIL_BYTES)
    return last_lines(data, cut=before > 0)


def read_attempt_tasks(conn: Connection, attempt_id: int) -> AttemptTasks:
    """An attempt and its tasks with their display states; NotFound if none."""
    attempt = history.get_attempt_view(conn, attempt_id)
    tasks = with_display_states(history.list_task_summaries(conn, attempt_id))
    return AttemptTasks(attempt, tasks)


def failures_of(conn: Connection, read: AttemptTasks, limit: int = MAX_FAILURES) -> Failures:
    """The failures of an attempt read by :func:`read_attempt_tasks`: none unless it
    ended in error."""
    if read.attempt.state != AttemptState.ERROR:
        return Failures([], 0)
    failed = failed_tasks(read.tasks)
    logs = log_store.list_run_logs(conn, read.attempt.id) if failed else []
    items = []
    for task in failed[:limit]:
        log = latest_run(logs, task.id)
        message = task.error_message or "failed"
        items.append(FailureView(task.full_name, task.id, message, tail_lines(conn, log), log))
    return Failures(items, len(failed) - len(items))


def read_failures(conn: Connection, attempt_id: int) -> Failures:
    """Why an attempt failed; NotFound if there is no such attempt."""
    return failures_of(conn, read_attempt_tasks(conn, attempt_id))


def read_task_detail(conn: Connection, attempt_id: int, task_id: int) -> TaskDetail:
    """One task of an attempt with its values and runs; NotFound if the attempt has no
    such task."""
    attempt = history.get_attempt_view(conn, attempt_id)
    task = find_task(conn, task_id)
    if task is None or task.attempt_id != attempt_id:
        raise NotFound(f"attempt {attempt_id} has no task {task_id}")
    masker = project_masker(conn, attempt.project_id)
    stored = (task.result or {}).get("store") or {}
    return TaskDetail(
        id=task.id,
        full_name=task.full_name,
        state=task.state.value,
        is_group=task.is_group,
        error=masker.mask_value(task.error) if task.error else None,
        started_at=task.started_at,
        finished_at=task.finished_at,
        params=masker.mask_value(task.params or {}),
        stored=masker.mask_value(stored if isinstance(stored, dict) else {"value": stored}),
        exported=masker.mask_value(task.config.get("export") or {}),
        runs=log_store.list_run_logs(conn, attempt_id, task_id=task_id),
    )


def project_masker(conn: Connection, project_id: int) -> Masker:
    """What hides the values of a project's secrets, as the agent hides them in logs and
    stored values; an empty masker when this server cannot decrypt them (it has no
    ``TICKWORK_SECRET_KEY``: then it holds no clear value to show either)."""
    encrypted = secret_store.read_encrypted_secrets(conn, project_id)
    if not encrypted:
        return Masker([])
    try:
        box = SecretBox.from_environment()
        return Masker(box.decrypt(value, name) for name, value in encrypted.items())
    except SecretKeyError:
        return Masker([])


def read_attempt_state(conn: Connection, attempt_id: int) -> AttemptView:
    """The attempt alone (its state among its values); NotFound if there is none."""
    return history.get_attempt_view(conn, attempt_id)


def read_stream_offset(conn: Connection, attempt_id: int) -> int:
    """Where the attempt's log stream (``/api/logs/{id}/follow``) stands now: the bytes of
    all its logs, in the order the stream counts them. A follower starting there gets
    only what is written from now on."""
    return sum(log.size_bytes for log in log_store.list_run_logs(conn, attempt_id))
