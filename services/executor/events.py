"""Agents' events applied to the store: starts, results under their lease token, and
tasks released to be run elsewhere."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import Connection

from services.executor.graph import TaskGraph
from services.executor.messages import build_task_message
from services.executor.report import Pass, TickReport
from services.executor.scope import Scope, over_task_limit
from shared.dispatch.messages import (
    Outcome,
    TaskEvent,
    TaskFinished,
    TaskMessage,
    TaskReleased,
    TaskStarted,
    WorkCommitted,
)
from shared.domain.states import TaskState
from shared.domain.workflow import TaskSpec
from shared.store import tasks as task_store
from shared.store.tasks import TaskRow

log = logging.getLogger(__name__)


class ResultFate(StrEnum):
    """What became of an agent's result."""

    APPLIED = "applied"
    REPEATED = "repeated"  # the run of its token had already ended: sent again
    STALE = "stale"  # its token is not the task's any more


def apply_events(work: Pass, scope: Scope, events: Sequence[TaskEvent]) -> None:
    """Apply agents' events; the messages of tasks released to be run elsewhere go to
    ``work.messages``."""
    conn, report = work.conn, work.report
    finished = {(e.task_id, e.lease_token) for e in events if isinstance(e, TaskFinished)}
    logs: list[dict[str, Any]] = []
    for event in events:
        if isinstance(event, WorkCommitted):
            continue
        if isinstance(event, TaskReleased):
            _release(work, scope, event)
        elif isinstance(event, TaskStarted):
            # A result in the same batch makes the RUNNING step moot.
            if (event.task_id, event.lease_token) in finished:
                continue
            name = task_store.mark_task_running(conn, event.task_id, event.lease_token, work.now)
            if name is not None:
                work.graph.record(event.task_id, name, TaskState.RUNNING)
                report.events_applied += 1
            else:
                report.stale_results += 1
        else:
            _count(report, apply_result(work.graph, event, logs, scope.max_tasks_per_attempt))
    task_store.record_task_logs(conn, [{**row, "created_at": work.now} for row in logs])


def _release(work: Pass, scope: Scope, event: TaskReleased) -> None:
    message = requeue(work.conn, scope, event.task_id, event.lease_token, work.now, lost=False)
    if message is not None:
        log.info("task released by its agent task_id=%d: %s", event.task_id, event.reason)
        work.graph.record(event.task_id, message.full_name, TaskState.QUEUED)
        work.messages.append(message)
        work.report.requeued += 1


def _count(report: TickReport, fate: ResultFate) -> None:
    if fate is ResultFate.APPLIED:
        report.events_applied += 1
    elif fate is ResultFate.REPEATED:
        report.repeated_results += 1
    else:
        report.stale_results += 1


def apply_result(
    graph: TaskGraph, event: TaskFinished, logs: list[dict[str, Any]], max_tasks: int
) -> ResultFate:
    """Apply a result under its lease token, whether or not its lease still exists;
    refused as ``stale`` if that token is not the task's, as ``repeated`` if the run
    of that token already ended (an agent sent its result again after Redis lost it).

    The token is checked in the row read first (most stale results stop there) and
    again in the UPDATE that moves the task (``... AND lease_token = :token``): that
    one is the fence, whatever happened in between."""
    task = task_store.find_task(graph.conn, event.task_id)
    applied = False
    if (
        task is not None
        and task.lease_token == event.lease_token
        and task.state in (TaskState.QUEUED, TaskState.RUNNING)
    ):
        if task.state is TaskState.QUEUED:  # its start came with its result, or never
            graph.record(task.id, task.full_name, TaskState.RUNNING)
        if event.outcome is Outcome.SUCCESS:
            applied = _succeed_with_subtasks(graph, task, event, max_tasks)
        else:
            error = {"message": event.error_message or "failed"}
            applied = graph.fail(task, error, fence=event.lease_token)
    if task is not None and not applied and _ended_under(task, event.lease_token):
        log.info(
            "refused a result already settled task_id=%d lease_token=%d",
            event.task_id,
            event.lease_token,
        )
        return ResultFate.REPEATED
    if task is None or not applied:
        log.warning(
            "refused a stale result task_id=%d lease_token=%d",
            event.task_id,
            event.lease_token,
        )
        return ResultFate.STALE
    if event.log_path is not None:
        logs.append(
            {
                "task_id": task.id,
                "attempt_id": task.attempt_id,
                "lease_token": event.lease_token,
                "path": event.log_path,
                "size_bytes": event.log_size_bytes,
                "truncated_bytes": event.log_truncated_bytes,
            }
        )
    return ResultFate.APPLIED


def requeue(
    conn: Connection, scope: Scope, task_id: int, token: int, now: datetime, *, lost: bool
) -> TaskMessage | None:
    """Give a QUEUED/RUNNING task the next lease token; its message, or None if the task
    is no longer under ``token``."""
    new_token = task_store.requeue_task(conn, task_id, token, now, lost=lost)
    if new_token is None:
        return None
    task = task_store.get_task(conn, task_id)
    return message_of(conn, scope, task)


def message_of(conn: Connection, scope: Scope, task: TaskRow) -> TaskMessage:
    """The message of an in-flight task as it was dispatched, under its current token."""
    context = scope.contexts.get(conn, task.attempt_id)
    return build_task_message(
        task, context, task.params, task.lease_token, scope.task_timeout_seconds
    )


def _succeed_with_subtasks(
    graph: TaskGraph, task: TaskRow, event: TaskFinished, limit: int
) -> bool:
    """Apply a successful result; the subtasks a ``py>`` task added become its ``^sub``,
    seeing what it exported (Digdag's ``add_subtask`` and ``export``)."""
    subtasks = TaskSpec.from_config(event.subtasks) if event.subtasks else None
    if subtasks is not None and subtasks.name != "^sub":
        subtasks = dataclasses.replace(subtasks, name="^sub")
    problem = over_task_limit(graph.conn, task, subtasks, limit)
    if problem is not None:
        return graph.fail(task, {"message": problem}, fence=event.lease_token)
    return graph.succeed_operator(
        task, event.store, called=subtasks, export=event.export or None, fence=event.lease_token
    )


def _ended_under(task: TaskRow, token: int) -> bool:
    """Whether the run of ``token`` is the task's last and ended with a result (the task
    moved on from it without a kill): a result of that token now is one sent again."""
    return task.lease_token == token and task.state not in (
        TaskState.QUEUED,
        TaskState.RUNNING,
        TaskState.CANCELED,
    )
