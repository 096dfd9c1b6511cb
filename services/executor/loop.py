"""The executor's loop: one ``tick()`` starts attempts, applies results and dispatches tasks."""

from __future__ import annotations

import dataclasses
import logging
import threading
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import Connection, Engine

from services.executor.graph import TaskGraph
from services.executor.materialize import Placement, materialize_children
from services.executor.messages import AttemptContext, build_task_message
from shared.clock import Clock, SystemClock
from shared.dispatch.messages import Outcome, TaskEvent, TaskFinished, TaskMessage, TaskStarted
from shared.dispatch.seam import Dispatcher
from shared.domain.states import AttemptState, TaskState
from shared.domain.workflow import TaskSpec
from shared.errors import InvalidExpression
from shared.store import sessions as session_store
from shared.store import tasks as task_store
from shared.store.projects import load_workflow_definition

log = logging.getLogger(__name__)


@dataclass
class TickReport:
    """What one pass did."""

    attempts_started: int = 0
    events_applied: int = 0
    stale_results: int = 0
    tasks_woken: int = 0
    groups_started: int = 0
    tasks_dispatched: int = 0
    finished_attempts: list[tuple[int, AttemptState]] = field(default_factory=list)

    @property
    def did_work(self) -> bool:
        """Whether anything changed; an idle loop backs off when nothing did."""
        return bool(
            self.attempts_started
            or self.events_applied
            or self.tasks_woken
            or self.groups_started
            or self.tasks_dispatched
        )


class WorkflowExecutor:
    """Walks attempts' task graphs and hands ready operator tasks to a dispatcher."""

    def __init__(
        self,
        engine: Engine,
        dispatcher: Dispatcher,
        *,
        clock: Clock | None = None,
        dispatch_batch_size: int = 1000,
        task_timeout_seconds: float | None = None,
    ) -> None:
        self.engine = engine
        self.dispatcher = dispatcher
        self.clock = clock or SystemClock()
        self.dispatch_batch_size = dispatch_batch_size
        self.task_timeout_seconds = task_timeout_seconds
        self._pending: list[TaskEvent] = []
        self._contexts: dict[int, AttemptContext] = {}
        self._stop = threading.Event()

    # -- one pass ----------------------------------------------------------------------

    def tick(self, now: datetime | None = None) -> TickReport:
        """One pass over the store; messages are published after the commit."""
        now = now or self.clock.now()
        report = TickReport()
        events, self._pending = self._pending + self.dispatcher.poll_events(0), []
        with self.engine.begin() as conn:
            graph = TaskGraph(conn, now)
            report.attempts_started = self._start_created_attempts(conn, graph)
            for event in events:
                if self._apply_event(conn, graph, event, now):
                    report.events_applied += 1
                else:
                    report.stale_results += 1
            report.tasks_woken = self._wake_retry_waiting(conn, now)
            report.groups_started = self._start_ready_groups(conn, graph, now)
            messages = self._dispatch_ready_operators(conn, graph, now)
            report.groups_started += self._start_ready_groups(conn, graph, now)
            report.finished_attempts = graph.finished_attempts
        self.dispatcher.publish(messages)
        report.tasks_dispatched = len(messages)
        for attempt_id, _state in report.finished_attempts:
            self._contexts.pop(attempt_id, None)
        return report

    def _start_created_attempts(self, conn: Connection, graph: TaskGraph) -> int:
        ids = session_store.list_attempt_ids_in_state(conn, AttemptState.CREATED, limit=100)
        for attempt_id in ids:
            attempt = session_store.get_attempt(conn, attempt_id)
            definition = load_workflow_definition(conn, attempt.workflow_definition_id)
            placement = Placement(
                attempt_id=attempt.id,
                parent_id=None,
                parent_full_name="",
                inherited_export=None,
                generated=False,
                resume_from_attempt_id=attempt.resume_from_attempt_id,
            )
            (root_id,) = materialize_children(conn, placement, [definition.root], [], graph.now)
            session_store.set_attempt_state(
                conn,
                attempt.id,
                AttemptState.RUNNING,
                graph.now,
                from_states=(AttemptState.CREATED,),
            )
            root = task_store.get_task(conn, root_id)
            if root.state is TaskState.SUCCESS:  # everything was resumed
                graph.after_terminal(root.id)
            else:
                graph.promote([root_id])
            log.info("attempt started attempt_id=%d workflow=%s", attempt.id, definition.name)
        return len(ids)

    def _apply_event(
        self, conn: Connection, graph: TaskGraph, event: TaskEvent, now: datetime
    ) -> bool:
        if isinstance(event, TaskStarted):
            return task_store.mark_task_running(conn, event.task_id, event.lease_token, now)
        task = task_store.find_task(conn, event.task_id, lock=True)
        if (
            task is None
            or task.lease_token != event.lease_token
            or task.state not in (TaskState.QUEUED, TaskState.RUNNING)
        ):
            log.warning(
                "refused a stale result task_id=%d lease_token=%d",
                event.task_id,
                event.lease_token,
            )
            return False
        self._record_log(conn, task, event, now)
        if event.outcome is Outcome.SUCCESS:
            graph.succeed_operator(task, event.store)
        else:
            graph.fail(task, {"message": event.error_message or "failed"})
        return True

    @staticmethod
    def _record_log(
        conn: Connection, task: task_store.TaskRow, event: TaskFinished, now: datetime
    ) -> None:
        if event.log_path is not None:
            task_store.insert_task_log(
                conn,
                task_id=task.id,
                attempt_id=task.attempt_id,
                lease_token=event.lease_token,
                path=event.log_path,
                size_bytes=event.log_size_bytes,
                now=now,
            )

    def _wake_retry_waiting(self, conn: Connection, now: datetime) -> int:
        due = task_store.select_tasks_due(conn, TaskState.RETRY_WAITING, now, limit=1000)
        woken = task_store.update_tasks_state(
            conn, [t.id for t in due], (TaskState.RETRY_WAITING,), TaskState.READY, now
        )
        return len(woken)

    def _start_ready_groups(self, conn: Connection, graph: TaskGraph, now: datetime) -> int:
        started = 0
        for _ in range(1000):  # nested groups start one level per round
            groups = task_store.select_tasks_due(
                conn, TaskState.READY, now, limit=1000, is_group=True
            )
            if not groups:
                break
            for group in groups:
                graph.start_group(group)
            started += len(groups)
        return started

    def _dispatch_ready_operators(
        self, conn: Connection, graph: TaskGraph, now: datetime
    ) -> list[TaskMessage]:
        ready = task_store.select_tasks_due(
            conn, TaskState.READY, now, limit=self.dispatch_batch_size, is_group=False
        )
        if not ready:
            return []
        stored = graph.stored_params(ready)
        drafts: dict[int, TaskMessage] = {}
        for task in ready:
            if task.config.get("operator") == "call":
                called = TaskSpec.from_config(task.config).called
                graph.succeed_operator(task, {}, called=called, params=stored[task.id])
                continue
            try:
                context = self._context(conn, task.attempt_id)
                drafts[task.id] = build_task_message(
                    task, context, stored[task.id], 0, self.task_timeout_seconds
                )
            except InvalidExpression as exc:
                graph.fail(task, {"message": f"{task.full_name}: {exc}"})
        tokens = task_store.mark_tasks_queued(
            conn, {task_id: stored[task_id] for task_id in drafts}, now
        )
        return [
            dataclasses.replace(drafts[task_id], lease_token=token)
            for task_id, token in tokens.items()
        ]

    def _context(self, conn: Connection, attempt_id: int) -> AttemptContext:
        context = self._contexts.get(attempt_id)
        if context is None:
            context = AttemptContext.of(session_store.get_attempt(conn, attempt_id))
            self._contexts[attempt_id] = context
        return context

    # -- waiting -----------------------------------------------------------------------

    def wait_for_work(self, timeout_seconds: float) -> None:
        """Block until an agent reports something or ``timeout_seconds`` pass."""
        self._pending.extend(self.dispatcher.poll_events(timeout_seconds))

    def seconds_until_due(self, now: datetime, cap_seconds: float) -> float:
        """How long the loop may sleep before a waiting task is due (at most ``cap_seconds``)."""
        with self.engine.connect() as conn:
            due = task_store.earliest_not_before(conn, (TaskState.RETRY_WAITING, TaskState.READY))
        if due is None:
            return cap_seconds
        return max(0.0, min(cap_seconds, (due - now).total_seconds()))

    def stop(self) -> None:
        """Ask :meth:`run_forever` to return after the current pass."""
        self._stop.set()

    def run_forever(self, idle_cap_seconds: float = 5.0) -> None:
        """Tick, and between ticks sleep until work arrives (backing off up to the cap)."""
        backoff = 0.05
        while not self._stop.is_set():
            report = self.tick()
            if report.did_work:
                backoff = 0.05
                continue
            wait = self.seconds_until_due(self.clock.now(), backoff)
            self.wait_for_work(wait)
            backoff = min(backoff * 2, idle_cap_seconds)
