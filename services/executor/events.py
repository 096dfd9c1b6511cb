"""Agents' events applied to the store: log chunks, starts, and tasks released to be run
elsewhere; results are handed, in their order among the others, to
:mod:`~tickwork.services.executor.results`, which applies them."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from tickwork.services.executor import results
from tickwork.services.executor.messages import build_task_message
from tickwork.services.executor.report import Pass
from tickwork.services.executor.scope import Scope
from tickwork.shared.dispatch.messages import (
    TaskEvent,
    TaskFinished,
    TaskLogChunk,
    TaskMessage,
    TaskReleased,
    TaskStarted,
    attempt_of_log_path,
)
from tickwork.shared.domain.states import TaskState
from tickwork.shared.store import logs as log_store
from tickwork.shared.store import tasks as task_store
from tickwork.shared.store.tasks import TaskRow

log = logging.getLogger(__name__)


def apply_events(work: Pass, scope: Scope, events: Sequence[TaskEvent]) -> None:
    """Apply agents' events; the messages of tasks released to be run elsewhere go to
    ``work.messages``.

    Between two releases, starts are applied first in one statement, then results in
    batches (see :mod:`~tickwork.services.executor.results`): a task's own events keep their order.
    """
    store_log_chunks(work, [e for e in events if isinstance(e, TaskLogChunk)])
    finished = {(e.task_id, e.lease_token) for e in events if isinstance(e, TaskFinished)}
    logs: list[dict[str, Any]] = []
    starts: list[TaskStarted] = []
    finished_runs: list[TaskFinished] = []
    for event in events:
        if isinstance(event, TaskReleased):
            _apply_starts(work, scope, starts)
            results.apply_results(work, scope, finished_runs, logs)
            starts, finished_runs = [], []
            _release(work, scope, event)
        elif isinstance(event, TaskStarted):
            # A result in the same batch makes the RUNNING step moot.
            if (event.task_id, event.lease_token) not in finished:
                starts.append(event)
        elif isinstance(event, TaskFinished):
            finished_runs.append(event)
    _apply_starts(work, scope, starts)
    results.apply_results(work, scope, finished_runs, logs)
    work.ended_logs += [{**row, "created_at": work.now} for row in logs]


def store_log_chunks(work: Pass, chunks: Sequence[TaskLogChunk]) -> None:
    """Keep the log chunks agents streamed for the pass to write in its transaction (a
    short task's only chunk so commits with its result): with the statement that queues
    the next runs where the store can, else at its end; their attempts' followers are
    told."""
    if not chunks:
        return
    written = [
        log_store.LogChunk(
            c.task_id, c.lease_token, c.offset, c.data.encode("utf-8", "surrogateescape")
        )
        for c in chunks
    ]
    work.log_chunks += log_store.chunk_rows(written)
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


def _release(work: Pass, scope: Scope, event: TaskReleased) -> None:
    message = requeue(work.conn, scope, event.task_id, event.lease_token, work.now, lost=False)
    if message is not None:
        log.info("task released by its agent task_id=%d: %s", event.task_id, event.reason)
        work.graph.record(event.task_id, message.full_name, TaskState.QUEUED)
        work.messages.append(message)
        work.report.requeued += 1


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
