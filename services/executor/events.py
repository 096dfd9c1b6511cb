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

from services.executor import results
from services.executor.graph import TaskGraph
from services.executor.messages import build_task_message
from services.executor.report import Pass, TickReport
from services.executor.scope import Scope, over_task_limit
from shared.dispatch.messages import (
    Outcome,
    TaskEvent,
    TaskFinished,
    TaskLogChunk,
    TaskMessage,
    TaskReleased,
    TaskStarted,
    attempt_of_log_path,
)
from shared.domain.states import TaskState
from shared.domain.workflow import TaskSpec
from shared.store import logs as log_store
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
    ``work.messages``.

    Between two releases, starts are applied first in one statement, then results in
    batches (see :mod:`~services.executor.results`): a task's own events keep their order.
    """
    store_log_chunks(work, [e for e in events if isinstance(e, TaskLogChunk)])
    finished = {(e.task_id, e.lease_token) for e in events if isinstance(e, TaskFinished)}
    logs: list[dict[str, Any]] = []
    starts: list[TaskStarted] = []
    results: list[TaskFinished] = []
    for event in events:
        if isinstance(event, TaskReleased):
            _apply_starts(work, scope, starts)
            _apply_results(work, scope, results, logs)
            starts, results = [], []
            _release(work, scope, event)
        elif isinstance(event, TaskStarted):
            # A result in the same batch makes the RUNNING step moot.
            if (event.task_id, event.lease_token) not in finished:
                starts.append(event)
        elif isinstance(event, TaskFinished):
            results.append(event)
    _apply_starts(work, scope, starts)
    _apply_results(work, scope, results, logs)
    work.ended_logs += [{**row, "created_at": work.now} for row in logs]


def store_log_chunks(work: Pass, chunks: Sequence[TaskLogChunk]) -> None:
    """Write the log chunks agents streamed, in the pass's transaction (a short task's
    only chunk so commits with its result); their attempts' followers are told."""
    if not chunks:
        return
    written = [
        log_store.LogChunk(
            c.task_id, c.lease_token, c.offset, c.data.encode("utf-8", "surrogateescape")
        )
        for c in chunks
    ]
    log_store.write_log_chunks(work.conn, written)
    work.report.log_bytes_stored += sum(len(c.data) for c in written)
    work.log_attempts.update(a for c in chunks if (a := attempt_of_log_path(c.path)) is not None)


def _apply_starts(work: Pass, scope: Scope, starts: Sequence[TaskStarted]) -> None:
    """QUEUED -> RUNNING under each start's token, in one statement."""
    if not starts:
        return
    runs = [(e.task_id, e.lease_token) for e in starts]
    moved = task_store.mark_tasks_running(work.conn, runs, work.now)
    for event in starts:
        name = moved.pop(event.task_id, None)  # a start sent twice counts once
        if name is not None:
            work.graph.record(event.task_id, name, TaskState.RUNNING)
            scope.runs.started(event.task_id, event.lease_token)
            work.report.events_applied += 1
        else:
            work.report.stale_results += 1


def _apply_results(
    work: Pass, scope: Scope, events: Sequence[TaskFinished], logs: list[dict[str, Any]]
) -> None:
    """Apply results in arrival order: simple fresh ones in set-based batches, refused
    ones from the row read, the rest one by one (after the batch before them)."""
    if not events:
        return
    graph, limit = work.graph, scope.max_tasks_per_attempt
    rows, known = results.read_tasks(graph, events, scope.runs)
    batch: list[tuple[TaskFinished, TaskRow]] = []
    seen: set[int] = set()  # tasks a result of this batch was applied to (or is waiting)

    def flush() -> None:
        moved = results.apply_simple(graph, batch)
        # A known row is the run's as queued: a refusal is judged on the row as it is.
        unmoved = {t.id for _, t in batch if t.id not in moved and t.id in known}
        now_read = {t.id: t for t in task_store.get_tasks(graph.conn, unmoved)}
        for event, task in batch:
            if task.id in moved:
                fate = ResultFate.APPLIED
            else:
                fate = _refused(now_read.get(task.id) if task.id in known else task, event)
            _count(work.report, fate)
            row = results.log_row(task, event) if fate is ResultFate.APPLIED else None
            if row is not None:
                logs.append(row)
        batch.clear()

    for event in events:
        task = rows.get(event.task_id)
        scope.runs.forget(event.task_id)
        if event.task_id in seen:  # its row changed: read it again
            flush()
            _count(work.report, apply_result(graph, event, logs, limit))
        elif task is None or not results.is_fresh(task, event):
            _count(work.report, _refused(task, event))
        elif results.is_simple(task, event):
            batch.append((event, task))
        else:
            flush()
            _count(work.report, apply_result(graph, event, logs, limit, task=task))
        seen.add(event.task_id)
    flush()


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
    graph: TaskGraph,
    event: TaskFinished,
    logs: list[dict[str, Any]],
    max_tasks: int,
    *,
    task: TaskRow | None = None,
) -> ResultFate:
    """Apply a result under its lease token, whether or not its lease still exists;
    refused as ``stale`` if that token is not the task's, as ``repeated`` if the run
    of that token already ended (an agent sent its result again after Redis lost it).

    The token is checked in the row read first (most stale results stop there) and
    again in the UPDATE that moves the task (``... AND lease_token = :token``): that
    one is the fence, whatever happened in between. ``task`` is the task's row if it
    was just read."""
    if task is None:
        task = task_store.find_task(graph.conn, event.task_id)
    applied = False
    if task is not None and results.is_fresh(task, event):
        if task.state is TaskState.QUEUED:  # its start came with its result, or never
            graph.record(task.id, task.full_name, TaskState.RUNNING)
        if event.outcome is Outcome.SUCCESS:
            applied = _succeed_with_subtasks(graph, task, event, max_tasks)
        else:
            error = {"message": event.error_message or "failed"}
            applied = graph.fail(task, error, fence=event.lease_token)
    if task is None or not applied:
        return _refused(task, event)
    row = results.log_row(task, event)
    if row is not None:
        logs.append(row)
    return ResultFate.APPLIED


def _refused(task: TaskRow | None, event: TaskFinished) -> ResultFate:
    """The fate of a result that did not move its task (``task`` as read before)."""
    if task is not None and _ended_under(task, event.lease_token):
        log.info(
            "refused a result already settled task_id=%d lease_token=%d",
            event.task_id,
            event.lease_token,
        )
        return ResultFate.REPEATED
    log.warning(
        "refused a stale result task_id=%d lease_token=%d", event.task_id, event.lease_token
    )
    return ResultFate.STALE


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
