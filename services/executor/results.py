"""Agents' results applied in batches: the common case in a few set-based statements, the
rest one by one.

A batch reads its tasks in one statement, but for the runs this executor queued, whose
rows it kept (:class:`~tickwork.services.executor.scope.QueuedRuns`). A fresh result (its token is
the task's, the task still QUEUED or RUNNING) that ends the task without more to do (a
success that stored, exported and added nothing, of a task without ``_check``; a failure
of a task without ``_retry`` or ``_error``) joins a set-based UPDATE, fenced by each run's
token in the UPDATE itself; anything else goes through
:func:`apply_result` in its turn, after the results before it. A task with two results in
one batch has the second applied after the first, so that it is refused as repeated.

This module owns a result's whole walk: read, judged fresh or refused (stale, repeated),
applied (with a ``py>`` task's subtasks), counted, and its log indexed.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

from tickwork.services.executor.graph import TaskGraph
from tickwork.services.executor.report import Pass, TickReport
from tickwork.services.executor.scope import QueuedRuns, Scope, over_task_limit
from tickwork.shared.dispatch.messages import Outcome, TaskFinished
from tickwork.shared.domain.states import TaskState
from tickwork.shared.domain.workflow import TaskSpec
from tickwork.shared.store import tasks as task_store
from tickwork.shared.store.tasks import TaskRow

log = logging.getLogger(__name__)


class ResultFate(StrEnum):
    """What became of an agent's result."""

    APPLIED = "applied"
    REPEATED = "repeated"  # the run of its token had already ended: sent again
    STALE = "stale"  # its token is not the task's any more


def is_simple(task: TaskRow, event: TaskFinished) -> bool:
    """Whether a fresh result ends its task with nothing generated, retried or stored."""
    if event.outcome is Outcome.SUCCESS:
        extra = event.subtasks or event.store or event.export
        return not extra and task.config.get("check") is None
    config = task.config
    return config.get("retry") is None and config.get("error") is None


def is_fresh(task: TaskRow | None, event: TaskFinished) -> bool:
    """Whether a result's token is its task's and the run has not ended."""
    return (
        task is not None
        and task.lease_token == event.lease_token
        and task.state in task_store.IN_FLIGHT_STATES
    )


def apply_simple(graph: TaskGraph, batch: Sequence[tuple[TaskFinished, TaskRow]]) -> set[int]:
    """End the runs of ``batch`` (fresh, simple results) with set-based UPDATEs: one for
    the successes, one per error message for the failures. Moves are recorded in arrival
    order; what waited for the tasks is then promoted together. The ids that moved."""
    conn, now = graph.conn, graph.now
    succeeding = [(e, t) for e, t in batch if e.outcome is Outcome.SUCCESS]
    successes = [(e.task_id, e.lease_token) for e, _ in succeeding]
    passing = [t.id for _, t in succeeding if t.params]
    looked = [t.id for _, t in succeeding if graph.may_promote_downstream(t)]
    moved, ready, seen = task_store.succeed_runs_promoting(conn, successes, passing, looked, now)
    failures: dict[str, list[tuple[int, int]]] = {}
    for event, _ in batch:
        if event.outcome is not Outcome.SUCCESS:
            message = event.error_message or "failed"
            failures.setdefault(message, []).append((event.task_id, event.lease_token))
    for message, runs in failures.items():
        moved |= task_store.fail_runs(conn, runs, {"message": message}, now)
    ended: list[tuple[TaskRow, TaskState]] = []
    for event, task in batch:
        if task.id not in moved:
            continue
        if task.state is TaskState.QUEUED:  # its start came with its result, or never
            graph.record(task.id, task.full_name, TaskState.RUNNING)
        state, values = _end_of(task, event)
        graph.ended(task, state, values)
        ended.append((task, state))
    graph.after_terminal_many(ended, (ready, seen))
    return moved


def _end_of(task: TaskRow, event: TaskFinished) -> tuple[TaskState, dict[str, Any]]:
    """The state a simple result ends its task in, and the values written with it."""
    if event.outcome is Outcome.SUCCESS:
        output = task.params or None
        return TaskState.SUCCESS, {"result": None, "output_params": output}
    return TaskState.ERROR, {"error": {"message": event.error_message or "failed"}}


def read_tasks(
    graph: TaskGraph, events: Sequence[TaskFinished], runs: QueuedRuns
) -> tuple[dict[int, TaskRow], set[int]]:
    """The tasks of a batch of results, by id: the rows ``runs`` knows for results that
    are simple, the rest read in one statement (none when all are known). The ids of the
    rows that were not read."""
    known: dict[int, TaskRow] = {}
    for event in events:
        task = runs.get(event.task_id, event.lease_token)
        if task is not None and is_simple(task, event):
            known[event.task_id] = task
    missing = {e.task_id for e in events} - known.keys()
    read = {t.id: t for t in task_store.get_tasks(graph.conn, missing)}
    return known | read, set(known)


def log_row(task: TaskRow, event: TaskFinished) -> dict[str, Any] | None:
    """The log index row an applied result describes, if it wrote a log."""
    if event.log_path is None:
        return None
    return {
        "task_id": task.id,
        "attempt_id": task.attempt_id,
        "lease_token": event.lease_token,
        "path": event.log_path,
        "size_bytes": event.log_size_bytes,
        "truncated_bytes": event.log_truncated_bytes,
    }


def apply_results(
    work: Pass, scope: Scope, events: Sequence[TaskFinished], logs: list[dict[str, Any]]
) -> None:
    """Apply results in arrival order: simple fresh ones in set-based batches, refused
    ones from the row read, the rest one by one (after the batch before them); the log
    index rows of the applied ones are added to ``logs``."""
    if not events:
        return
    graph, limit = work.graph, scope.max_tasks_per_attempt
    rows, known = read_tasks(graph, events, scope.runs)
    batch: list[tuple[TaskFinished, TaskRow]] = []
    seen: set[int] = set()  # tasks a result of this batch was applied to (or is waiting)

    def flush() -> None:
        moved = apply_simple(graph, batch)
        # A known row is the run's as queued: a refusal is judged on the row as it is.
        unmoved = {t.id for _, t in batch if t.id not in moved and t.id in known}
        now_read = {t.id: t for t in task_store.get_tasks(graph.conn, unmoved)}
        for event, task in batch:
            if task.id in moved:
                fate = ResultFate.APPLIED
            else:
                fate = _refused(now_read.get(task.id) if task.id in known else task, event)
            _count(work.report, fate)
            row = log_row(task, event) if fate is ResultFate.APPLIED else None
            if row is not None:
                logs.append(row)
        batch.clear()

    for event in events:
        task = rows.get(event.task_id)
        scope.runs.forget(event.task_id)
        if event.task_id in seen:  # its row changed: read it again
            flush()
            _count(work.report, apply_result(graph, event, logs, limit))
        elif task is None or not is_fresh(task, event):
            _count(work.report, _refused(task, event))
        elif is_simple(task, event):
            batch.append((event, task))
        else:
            flush()
            _count(work.report, apply_result(graph, event, logs, limit, task=task))
        seen.add(event.task_id)
    flush()


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
    if task is not None and is_fresh(task, event):
        if task.state is TaskState.QUEUED:  # its start came with its result, or never
            graph.record(task.id, task.full_name, TaskState.RUNNING)
        if event.outcome is Outcome.SUCCESS:
            applied = _succeed_with_subtasks(graph, task, event, max_tasks)
        else:
            error = {"message": event.error_message or "failed"}
            applied = graph.fail(task, error, fence=event.lease_token)
    if task is None or not applied:
        return _refused(task, event)
    row = log_row(task, event)
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
