"""The dispatch seam: how the executor hands tasks to agents and hears back.

The Celery/Redis implementation (shared/dispatch/celery_dispatch.py) and the in-process
ones that run agents' work on a thread pool (services/compose/dispatchers.py) sit behind
the same :class:`Dispatcher` Protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from tickwork.shared.dispatch.leases import LeaseState
from tickwork.shared.dispatch.messages import TaskEvent, TaskMessage

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

    def queue_depths(self, queues: Sequence[str]) -> dict[str, int]:
        """Messages waiting in each queue (not yet taken by an agent); a queue left out is
        not known to be empty."""

    def close(self) -> None:
        """Stop taking work and release resources."""
