"""The in-process dispatchers: agents' work on a thread pool of this process, behind the
executor's :class:`~tickwork.shared.dispatch.seam.Dispatcher` seam.

:class:`InProcessDispatcher` serves ``tickwork run`` (one attempt, nothing to revoke or
reap); :class:`ControlledDispatcher` serves ``tickwork standalone``, where attempts are
killed and a restarted process must tell its reaper which tasks it holds.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from tickwork.services.agent.local import StreamingRunner
from tickwork.services.agent.operators.base import RunControl, StopReason
from tickwork.shared.dispatch.leases import Lease, LeaseState
from tickwork.shared.dispatch.messages import TaskEvent, TaskMessage, WorkCommitted
from tickwork.shared.dispatch.seam import EventSink, TaskRunner


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

    def queue_depths(self, queues: Sequence[str]) -> dict[str, int]:
        """None known: there are no broker queues, and no message leaves one unseen."""
        return {}

    def close(self) -> None:
        """Drop queued messages and wait for the running ones to finish."""
        self._pool.shutdown(wait=True, cancel_futures=True)


class ControlledDispatcher(InProcessDispatcher):
    """The in-process dispatcher, which also stops revoked (killed) tasks and tells the
    executor's reaper which in-flight tasks this process holds: those it does not were
    left by an earlier process and are published again (queued) or requeued (running)."""

    def __init__(self, runner: StreamingRunner, max_workers: int) -> None:
        super().__init__(self._run, max_workers)
        self._task_runner = runner
        self._controls: dict[tuple[int, int], RunControl] = {}
        self._held: dict[int, int] = {}  # task id -> newest token published here
        self._revoked: set[tuple[int, int]] = set()
        self._lock = threading.Lock()

    def publish(self, messages: Sequence[TaskMessage]) -> None:
        """Remember each message's token as held here, then queue it on the pool."""
        with self._lock:
            for message in messages:
                self._held[message.task_id] = message.lease_token
        super().publish(messages)

    def _run(self, message: TaskMessage, report: EventSink) -> None:
        key = (message.task_id, message.lease_token)
        control = RunControl()
        with self._lock:
            if key in self._revoked:
                self._revoked.discard(key)
                return  # killed before it started: its task is already canceled
            self._controls[key] = control
        try:
            self._task_runner(message, report, control)
        finally:
            with self._lock:
                self._controls.pop(key, None)

    def revoke(self, tasks: Sequence[tuple[int, int]]) -> None:
        """Stop these runs if they are going; drop them if they have not started."""
        for key in tasks:
            with self._lock:
                control = self._controls.get(key)
                if control is None:
                    self._revoked.add(key)
            if control is not None:
                control.stop(StopReason.KILLED)

    def lease_states(self, task_ids: Sequence[int]) -> dict[int, LeaseState] | None:
        """A lease for each task published here; none (never taken) for the others."""
        with self._lock:
            held = {task_id: self._held.get(task_id) for task_id in task_ids}
        return {
            task_id: LeaseState(Lease(task_id, token, "standalone"), token)
            if token is not None
            else LeaseState(None, 0)
            for task_id, token in held.items()
        }

    def wake(self) -> None:
        """Make the executor's wait end and look for new attempts and kills."""
        self._events.put(WorkCommitted())
