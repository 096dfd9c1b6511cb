"""The dispatch seam: how the executor hands tasks to agents and hears back.

The in-process implementation runs agents' work in a thread pool; a Celery/Redis one sits
behind the same :class:`Dispatcher` Protocol.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from shared.dispatch.leases import LeaseState
from shared.dispatch.messages import TaskEvent, TaskMessage

EventSink = Callable[[TaskEvent], None]
TaskRunner = Callable[[TaskMessage, EventSink], None]


class Dispatcher(Protocol):
    """The executor's side of the seam."""

    def publish(self, messages: Sequence[TaskMessage]) -> None:
        """Send tasks whose ``queued`` state is already committed."""

    def poll_events(self, timeout_seconds: float) -> list[TaskEvent]:
        """Every event that arrived, waiting up to ``timeout_seconds`` for the first one."""

    def acknowledge(self) -> None:
        """The events polled so far are applied and committed: forget them for good."""

    def redeliver(self) -> None:
        """Applying the events polled since the last acknowledgement failed: poll them again."""

    def revoke(self, tasks: Sequence[tuple[int, int]]) -> None:
        """Stop ``(task id, lease token)`` wherever it is: queued messages are refused,
        running operators are killed (their tasks are already canceled in the store)."""

    def lease_states(self, task_ids: Sequence[int]) -> dict[int, LeaseState] | None:
        """What the leases say of each task, for the reaper; None when there are none."""

    def close(self) -> None:
        """Stop taking work and release resources."""


class InProcessDispatcher:
    """Runs each message with ``runner`` on a thread pool of ``max_workers``."""

    def __init__(self, runner: TaskRunner, max_workers: int) -> None:
        self._runner = runner
        self._events: queue.SimpleQueue[TaskEvent] = queue.SimpleQueue()
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="agent")

    def publish(self, messages: Sequence[TaskMessage]) -> None:
        """Queue each message on the pool; its events arrive through :meth:`poll_events`."""
        for message in messages:
            self._pool.submit(self._runner, message, self._events.put)

    def poll_events(self, timeout_seconds: float) -> list[TaskEvent]:
        """Every event the pool's tasks reported, waiting up to the timeout for the first."""
        events: list[TaskEvent] = []
        try:
            events.append(self._events.get(timeout=max(timeout_seconds, 0.0)))
        except queue.Empty:
            return events
        while True:
            try:
                events.append(self._events.get_nowait())
            except queue.Empty:
                return events

    def acknowledge(self) -> None:
        """Nothing to do: events live in memory only."""

    def redeliver(self) -> None:
        """Nothing to do: an in-process run that failed a pass stops."""

    def revoke(self, tasks: Sequence[tuple[int, int]]) -> None:
        """Nothing to do here: an embedded run stops its commands when its attempt ends."""

    def lease_states(self, task_ids: Sequence[int]) -> dict[int, LeaseState] | None:
        """None: threads in this process cannot be lost without the process."""
        return None

    def close(self) -> None:
        """Drop queued messages and wait for the running ones to finish."""
        self._pool.shutdown(wait=True, cancel_futures=True)
