"""What the executor's steps share from pass to pass: the attempts it runs, their
contexts (read once per attempt), and its limits."""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from tickwork.services.executor.messages import AttemptContext, queue_of
from tickwork.shared.domain.schedule import ScheduleSpec
from tickwork.shared.domain.states import TaskState
from tickwork.shared.domain.workflow import TaskSpec, WorkflowDefinition
from tickwork.shared.store import secrets as secret_store
from tickwork.shared.store import sessions as session_store
from tickwork.shared.store import tasks as task_store
from tickwork.shared.store.partitions import AttemptFilter
from tickwork.shared.store.projects import archive_digest_of_attempt, load_workflow_definition
from tickwork.shared.store.sessions import AttemptRow
from tickwork.shared.store.tasks import TaskRow

MAX_TASKS_PER_ATTEMPT = 10_000
"""Tasks one attempt may have, generated ones included (configurable)."""

QUEUED_RUNS_KEPT = 20_000
"""Rows of queued runs an executor keeps (see :class:`QueuedRuns`), at most."""


class AttemptContexts:
    """What every task of an attempt shares, read once per attempt (this executor
    started it, or it reads it on the attempt's first dispatch after a restart)."""

    def __init__(self) -> None:
        self._contexts: dict[int, AttemptContext] = {}

    def get(self, conn: Connection, attempt_id: int) -> AttemptContext:
        """The attempt's context, read from the store the first time."""
        context = self._contexts.get(attempt_id)
        if context is None:
            attempt = session_store.get_attempt(conn, attempt_id)
            definition = load_workflow_definition(conn, attempt.workflow_definition_id)
            context = self.remember(conn, attempt, definition)
        return context

    def remember(
        self, conn: Connection, attempt: AttemptRow, definition: WorkflowDefinition
    ) -> AttemptContext:
        """Read and keep the context of an attempt being started."""
        schedule = None
        if definition.schedule is not None:
            schedule = ScheduleSpec.from_config(definition.schedule)
        last_executed = session_store.last_executed_session_time(
            conn, attempt.project_id, attempt.workflow_name, attempt.session_time
        )
        digest = archive_digest_of_attempt(conn, attempt.id)
        secrets = secret_store.read_encrypted_secrets(conn, attempt.project_id)
        retry_name = session_store.retry_attempt_name(conn, attempt)
        context = AttemptContext.of(
            attempt, schedule, last_executed, digest, secrets, retry_name=retry_name
        )
        self._contexts[attempt.id] = context
        return context

    def forget(self, attempt_id: int) -> None:
        """The attempt ended: its context is not needed again."""
        self._contexts.pop(attempt_id, None)


class QueuedRuns:
    """The rows of the runs this executor queued, as they are while those runs last, so
    that a result of one of them is applied without reading its task first.

    A row is known by its task and lease token. Nothing else of a task changes while one
    run of it lasts, except its state (QUEUED, then RUNNING as its start is applied here);
    whatever another process did to it meanwhile (a kill, a requeue, a result applied
    elsewhere), the UPDATE that ends the run is fenced by the token and the in-flight
    states, and a result that did not move its task is judged on the row read then. At
    most ``limit`` rows are kept, the oldest forgotten first (their results read their
    tasks, as after a restart).
    """

    def __init__(self, limit: int = QUEUED_RUNS_KEPT) -> None:
        self.limit = limit
        self._rows: dict[int, TaskRow] = {}  # task id -> row under its run's token
        self._waiting: Counter[str] = Counter()  # queue -> its runs not seen to start

    @property
    def waiting(self) -> int:
        """How many of the rows kept are of runs no agent was seen to start yet."""
        return self._waiting.total()

    def waiting_behind(self, task_id: int, token: int) -> int:
        """How many runs no agent was seen to start wait on the queue of the run of
        ``token`` (0 if that run is not known)."""
        row = self.get(task_id, token)
        return 0 if row is None else self._waiting[queue_of(row)]

    def __len__(self) -> int:
        return len(self._rows)

    def queued(
        self, task: TaskRow, token: int, params: dict[str, Any] | None, now: datetime
    ) -> None:
        """``task`` (as read READY) was queued under ``token`` with ``params``."""
        self.forget(task.id)
        self._rows[task.id] = dataclasses.replace(
            task,
            state=TaskState.QUEUED,
            lease_token=token,
            params=params,
            started_at=task.started_at or now,
            updated_at=now,
        )
        self._waiting[queue_of(task)] += 1
        while len(self._rows) > self.limit:
            self.forget(next(iter(self._rows)))

    def started(self, task_id: int, token: int) -> None:
        """The run of ``token`` was applied as RUNNING."""
        row = self.get(task_id, token)
        if row is not None and row.state is TaskState.QUEUED:
            self._rows[task_id] = dataclasses.replace(row, state=TaskState.RUNNING)
            self._waiting[queue_of(row)] -= 1

    def get(self, task_id: int, token: int) -> TaskRow | None:
        """The row of the run of ``token``, if it is known."""
        row = self._rows.get(task_id)
        return row if row is not None and row.lease_token == token else None

    def forget(self, task_id: int) -> None:
        """The task's run is over or will never report: its result came (whatever became
        of it), it was revoked, or it was given up as lost."""
        row = self._rows.pop(task_id, None)
        if row is not None and row.state is TaskState.QUEUED:
            self._waiting[queue_of(row)] -= 1

    def clear(self) -> None:
        """Forget every row (the attempts this executor runs changed)."""
        self._rows.clear()
        self._waiting.clear()


@dataclass
class Scope:
    """Which attempts an executor runs and within which limits.

    ``attempt_ids`` None means every attempt; an embedded run names its own (a frozenset),
    and adds those its ``require>`` tasks start; a distributed executor keeps to the
    partitions it holds (an :class:`~tickwork.shared.store.partitions.AttemptFilter`, changed
    between passes). The store's queries take either as their ``attempt_ids``.
    """

    attempt_ids: frozenset[int] | AttemptFilter | None
    task_timeout_seconds: float | None = None
    max_tasks_per_attempt: int = MAX_TASKS_PER_ATTEMPT
    dispatch_batch_size: int = 1000
    # The pools that READY tasks of these attempts wait for (as of the last scan, and
    # since): a pass that may have freed a slot admits their tasks.
    pools_waiting: set[str] = field(default_factory=set)
    contexts: AttemptContexts = field(default_factory=AttemptContexts)
    runs: QueuedRuns = field(default_factory=QueuedRuns)
    # (task id, token) of queued runs under a confirmed mark, no lease taken, whose queue
    # the reaper found empty: since when (see recovery.TAKEN_OFF_QUEUE_SECONDS).
    taken_off_queue_since: dict[tuple[int, int], datetime] = field(default_factory=dict)


def over_task_limit(
    conn: Connection, task: TaskRow, generated: TaskSpec | None, limit: int
) -> str | None:
    """Why generating ``generated`` under ``task`` would take its attempt over ``limit``
    tasks; None when it fits (or nothing is generated)."""
    if generated is None:
        return None
    total = task_store.count_attempt_tasks(conn, task.attempt_id) + generated.count_tasks()
    if total <= limit:
        return None
    return (
        f"the attempt would have {total} tasks, over the limit of {limit} "
        "(TICKWORK_MAX_TASKS_PER_ATTEMPT)"
    )
