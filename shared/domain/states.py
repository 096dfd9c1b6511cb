"""Task and attempt states, and the one table of which task state may follow which."""

from __future__ import annotations

from enum import StrEnum


class TaskState(StrEnum):
    """Where one task row stands; stored as its string value."""

    BLOCKED = "blocked"  # waiting for its parent to start or an upstream sibling to succeed
    DELAYED = "delayed"  # could start but for its _delay/_start_at; ready at not_before
    READY = "ready"  # may start: an operator task waits for dispatch, a group for its children
    QUEUED = "queued"  # handed to the dispatch seam under a fresh lease token
    RUNNING = "running"  # an agent reported that the operator started
    PLANNED = "planned"  # waiting for its children (a group, generated subtasks, _check, _error)
    RETRY_WAITING = "retry_waiting"  # failed with retries left; ready again at not_before
    SUCCESS = "success"
    ERROR = "error"
    CANCELED = "canceled"

    @property
    def is_terminal(self) -> bool:
        """True once the task can never change again (until a group retry resets it)."""
        return self in TERMINAL_TASK_STATES


TERMINAL_TASK_STATES = frozenset({TaskState.SUCCESS, TaskState.ERROR, TaskState.CANCELED})
ACTIVE_TASK_STATES = frozenset(
    {
        TaskState.DELAYED,
        TaskState.READY,
        TaskState.QUEUED,
        TaskState.RUNNING,
        TaskState.PLANNED,
        TaskState.RETRY_WAITING,
    }
)
"""States of a task that has started and not ended: its parent must wait for it."""

CURRENT_ERROR_STATES = frozenset({TaskState.ERROR, TaskState.RETRY_WAITING})
"""States in which a task's stored error is its current one (after a retry succeeds the
error is kept, but is no longer current)."""

TIMED_TASK_STATES = (TaskState.RETRY_WAITING, TaskState.DELAYED)
"""States a task leaves for READY once its ``not_before`` time has come."""

ALLOWED_TASK_TRANSITIONS: dict[TaskState, frozenset[TaskState]] = {
    TaskState.BLOCKED: frozenset(
        {TaskState.DELAYED, TaskState.READY, TaskState.SUCCESS, TaskState.CANCELED}
    ),
    TaskState.DELAYED: frozenset({TaskState.READY, TaskState.CANCELED}),
    TaskState.READY: frozenset(
        {
            TaskState.DELAYED,  # a wait> task waiting out its time (no agent holds it)
            TaskState.QUEUED,
            TaskState.PLANNED,
            TaskState.RETRY_WAITING,  # its params could not be evaluated, and it has retries
            TaskState.SUCCESS,
            TaskState.ERROR,
            TaskState.CANCELED,
        }
    ),
    TaskState.QUEUED: frozenset(
        {
            TaskState.QUEUED,  # requeued under a new lease token
            TaskState.RUNNING,
            TaskState.SUCCESS,
            TaskState.PLANNED,
            TaskState.RETRY_WAITING,
            TaskState.ERROR,
            TaskState.CANCELED,
        }
    ),
    TaskState.RUNNING: frozenset(
        {
            TaskState.QUEUED,
            TaskState.SUCCESS,
            TaskState.PLANNED,
            TaskState.RETRY_WAITING,
            TaskState.ERROR,
            TaskState.CANCELED,
        }
    ),
    TaskState.PLANNED: frozenset(
        {
            TaskState.PLANNED,  # an _error or _check child was added
            TaskState.SUCCESS,
            TaskState.RETRY_WAITING,
            TaskState.ERROR,
            TaskState.CANCELED,
        }
    ),
    TaskState.RETRY_WAITING: frozenset({TaskState.READY, TaskState.CANCELED}),
    TaskState.SUCCESS: frozenset({TaskState.BLOCKED}),  # a group retry resets its subtree
    TaskState.ERROR: frozenset({TaskState.BLOCKED}),
    TaskState.CANCELED: frozenset({TaskState.BLOCKED}),
}


def states_before(target: TaskState) -> tuple[TaskState, ...]:
    """Every state from which ``target`` may be reached: the WHERE clause of a guarded update."""
    return tuple(s for s, allowed in ALLOWED_TASK_TRANSITIONS.items() if target in allowed)


class AttemptState(StrEnum):
    """Where one attempt of a session stands."""

    WAITING = "waiting"  # held back by its schedule's overlap policy or a serial backfill
    CREATED = "created"  # inserted; its task tree is not materialized yet
    RUNNING = "running"
    CANCELING = "canceling"  # a kill was asked for; the executor stops its tasks
    SUCCESS = "success"
    ERROR = "error"
    CANCELED = "canceled"  # superseded: another run of the session took over
    KILLED = "killed"  # stopped by a kill

    @property
    def is_done(self) -> bool:
        """True once the attempt has ended and nothing of it runs any more."""
        return self in DONE_ATTEMPT_STATES


DONE_ATTEMPT_STATES = frozenset(
    {AttemptState.SUCCESS, AttemptState.ERROR, AttemptState.CANCELED, AttemptState.KILLED}
)
KILLABLE_ATTEMPT_STATES = (AttemptState.WAITING, AttemptState.CREATED, AttemptState.RUNNING)


def attempt_state_for(root_state: TaskState) -> AttemptState:
    """The attempt state that a terminal root task state ends the attempt in."""
    return {
        TaskState.SUCCESS: AttemptState.SUCCESS,
        TaskState.ERROR: AttemptState.ERROR,
        TaskState.CANCELED: AttemptState.CANCELED,
    }[root_state]


class ScheduleState(StrEnum):
    """Where a schedule stands, as lists show it (derived from its row, not stored)."""

    ACTIVE = "active"  # emits its session times
    PAUSED = "paused"  # paused by hand: the times due now do not run
    FAILING = "failing"  # active, but its last scheduler passes failed
    REMOVED = "removed"  # its workflow left the project: it emits nothing

    @classmethod
    def of(cls, *, paused: bool, removed: bool, failures: int) -> ScheduleState:
        """The state of a schedule that is (or not) paused and removed, with ``failures``
        scheduler passes failed in a row."""
        if removed:
            return cls.REMOVED
        if paused:
            return cls.PAUSED
        return cls.FAILING if failures else cls.ACTIVE
