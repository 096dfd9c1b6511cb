"""Driving the workflow executor one ``tick(now)`` at a time, with the test as the agent.

The agent is a stub behind the Dispatcher seam: it records the messages the executor
publishes, and the test decides when each one starts and how it ends by feeding back
``TaskStarted``/``TaskFinished`` events.
"""

from __future__ import annotations

import textwrap
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from tests.support.files import write_under
from tickwork.services.compose.embedded import RunRequest, create_run_attempt
from tickwork.services.executor.graph import TaskMove
from tickwork.services.executor.loop import TickReport, WorkflowExecutor
from tickwork.shared.clock import ManualClock
from tickwork.shared.dispatch.leases import Lease, LeaseState
from tickwork.shared.dispatch.messages import (
    Outcome,
    TaskEvent,
    TaskFinished,
    TaskMessage,
    TaskStarted,
    WorkCommitted,
)
from tickwork.shared.dispatch.seam import Dispatcher
from tickwork.shared.domain.states import AttemptState, TaskState
from tickwork.shared.domain.workflow import WorkflowDefinition
from tickwork.shared.dsl.parser import parse_workflow_text
from tickwork.shared.store import sessions as session_store
from tickwork.shared.store import tasks as task_store
from tickwork.shared.store.tasks import TaskRow

START = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)
SESSION_TIME = datetime(2024, 5, 1, 0, 0, tzinfo=UTC)
MAX_TICKS = 50


class AgentStub:
    """A Dispatcher whose agent is the test: it records messages and replays given events."""

    def __init__(self) -> None:
        self.published: list[TaskMessage] = []
        self.revoked: list[tuple[int, int]] = []
        self.leases: dict[int, Lease | None] | None = None  # None: no leases (in-process)
        self.taken: dict[int, int] = {}  # task id -> newest token an agent took
        self.unconfirmed: set[int] = set()  # queued marks whose publisher never confirmed
        self.off_queue: set[int] = set()  # tasks whose message an agent took off its queue
        self._events: list[TaskEvent] = []

    def publish(self, messages: Sequence[TaskMessage]) -> None:
        self.published.extend(messages)

    def poll_events(self, timeout_seconds: float) -> list[TaskEvent]:
        events, self._events = self._events, []
        return events

    def acknowledge(self) -> None:
        pass

    def redeliver(self) -> None:
        pass

    def revoke(self, tasks: Sequence[tuple[int, int]]) -> None:
        self.revoked.extend(tasks)

    def lease_states(self, task_ids: Sequence[int]) -> dict[int, LeaseState] | None:
        if self.leases is None:
            return None
        return {
            i: LeaseState(self.leases.get(i), self.taken.get(i, 0), i in self.unconfirmed)
            for i in task_ids
        }

    def queue_depths(self, queues: Sequence[str]) -> dict[str, int]:
        """The newest message of each task is in its queue until an agent takes it (its
        lease, or the message alone: ``off_queue``)."""
        newest = {m.task_id: m for m in self.published}
        depths = dict.fromkeys(queues, 0)
        for message in newest.values():
            gone = message.task_id in self.taken or message.task_id in self.off_queue
            if message.queue in depths and not gone:
                depths[message.queue] += 1
        return depths

    def close(self) -> None:
        pass

    def report(self, *events: TaskEvent) -> None:
        self._events.extend(events)


def finished(
    message: TaskMessage,
    outcome: Outcome = Outcome.SUCCESS,
    *,
    store: dict[str, Any] | None = None,
    error: str | None = None,
) -> TaskFinished:
    """The result an agent would report for ``message``."""
    return TaskFinished(
        task_id=message.task_id,
        lease_token=message.lease_token,
        outcome=outcome,
        finished_at=time.time(),
        store=store or {},
        error_message=error,
    )


class Scenario:
    """One workflow run: an executor, its agent stub, a manual clock, and the store."""

    def __init__(self, engine: Engine, project_dir: Path) -> None:
        self.engine = engine
        self.project_dir = project_dir
        self.clock = ManualClock(START)
        self.agent = AgentStub()
        dispatcher: Dispatcher = self.agent
        self.executor = WorkflowExecutor(engine, dispatcher, clock=self.clock)
        self.open: dict[str, TaskMessage] = {}  # published, not yet answered, by full name
        self.attempt_id = 0
        self.report = TickReport()
        self.finished_attempts: list[tuple[int, AttemptState]] = []  # over every tick
        self.moves: list[TaskMove] = []  # over every tick

    # -- setting up --------------------------------------------------------------------

    def start(self, text: str, files: dict[str, str] | None = None) -> int:
        """Parse ``text`` as wf.dig (with extra project ``files``) and create its attempt."""
        for name, body in (files or {}).items():
            write_under(self.project_dir, name, textwrap.dedent(body))
        definition = parse_workflow_text(textwrap.dedent(text), "wf.dig", self.project_dir)
        return self.start_definition(definition)

    def start_definition(self, definition: WorkflowDefinition) -> int:
        request = RunRequest(
            definition=definition,
            project_dir=self.project_dir,
            state_dir=self.project_dir / ".state",
            database_url="unused",
            params={},
            session_time=SESSION_TIME,
        )
        with self.engine.begin() as conn:
            self.attempt_id = create_run_attempt(conn, request, self.clock.now()).attempt_id
        self.agent.report(WorkCommitted())  # what PostgreSQL NOTIFY tells a live executor
        return self.attempt_id

    # -- driving -----------------------------------------------------------------------

    def tick(self, after_seconds: float = 0) -> list[str]:
        """One pass, ``after_seconds`` after the last; the full names it published."""
        now = self.clock.advance(after_seconds)
        before = len(self.agent.published)
        self.report = self.executor.tick(now)
        self.finished_attempts += self.report.finished_attempts
        self.moves += self.report.moves
        new = self.agent.published[before:]
        self.open.update((m.full_name, m) for m in new)
        return [m.full_name for m in new]

    def step(self, after_seconds: float = 0) -> list[str]:
        """Tick at one instant until a pass does nothing; everything published meanwhile."""
        names = self.tick(after_seconds)
        for _ in range(MAX_TICKS):
            if not self.report.did_work:
                return names
            names += self.tick()
        raise AssertionError("the executor never went idle")

    def succeed(self, name: str, store: dict[str, Any] | None = None) -> TaskMessage:
        message = self.open.pop(name)
        self.agent.report(
            TaskStarted(message.task_id, message.lease_token, time.time()),
            finished(message, store=store),
        )
        return message

    def fail(self, name: str, error: str = "boom") -> TaskMessage:
        message = self.open.pop(name)
        self.agent.report(finished(message, Outcome.ERROR, error=error))
        return message

    def run_to_end(self, fail: Sequence[str] = ()) -> AttemptState:
        """Answer every message (failing those named in ``fail``) until the attempt ends."""
        for _ in range(MAX_TICKS):
            self.step()
            if self.attempt_state().is_done:
                return self.attempt_state()
            for name in list(self.open):
                self.fail(name) if name in fail else self.succeed(name)
        raise AssertionError("the attempt never ended")

    # -- looking -----------------------------------------------------------------------

    def tasks(self) -> list[TaskRow]:
        with self.engine.connect() as conn:
            return task_store.list_attempt_tasks(conn, self.attempt_id)

    def task(self, full_name: str) -> TaskRow:
        (task,) = [t for t in self.tasks() if t.full_name == full_name]
        return task

    def states(self) -> dict[str, TaskState]:
        return {t.full_name: t.state for t in self.tasks()}

    def in_flight(self) -> list[str]:
        active = (TaskState.QUEUED, TaskState.RUNNING)
        return sorted(t.full_name for t in self.tasks() if t.state in active)

    def attempt_state(self) -> AttemptState:
        with self.engine.connect() as conn:
            return session_store.get_attempt(conn, self.attempt_id).state

    def messages_for(self, full_name: str) -> list[TaskMessage]:
        return [m for m in self.agent.published if m.full_name == full_name]

    def assert_every_task_terminal(self) -> None:
        unfinished = {n: s for n, s in self.states().items() if not s.is_terminal}
        assert unfinished == {}
