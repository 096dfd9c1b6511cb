"""Agents' results applied in batches: the common case in a few set-based statements, the
rest one by one.

A batch reads its tasks in one statement, but for the runs this executor queued, whose
rows it kept (:class:`~services.executor.scope.QueuedRuns`). A fresh result (its token is
the task's, the task still QUEUED or RUNNING) that ends the task without more to do (a
success that stored, exported and added nothing, of a task without ``_check``; a failure
of a task without ``_retry`` or ``_error``) joins a set-based UPDATE, fenced by each run's
token in the UPDATE itself; anything else goes through
:func:`~services.executor.events.apply_result` in its turn, after the results before it.
A task with two results in one batch has the second applied after the first, so that it
is refused as repeated.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from services.executor.graph import TaskGraph
from services.executor.scope import QueuedRuns
from shared.dispatch.messages import Outcome, TaskFinished
from shared.domain.states import TaskState
from shared.store import tasks as task_store
from shared.store.tasks import TaskRow


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
