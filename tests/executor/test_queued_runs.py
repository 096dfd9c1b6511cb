"""Specifications of the rows an executor keeps of the runs it queued (QueuedRuns)."""

from __future__ import annotations

from datetime import UTC, datetime

from tickwork.services.executor.scope import QueuedRuns
from tickwork.shared.domain.states import TaskState
from tickwork.shared.store.tasks import TaskRow

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def ready_task(task_id: int, token: int = 0) -> TaskRow:
    return TaskRow(
        id=task_id,
        attempt_id=1,
        parent_id=None,
        full_name=f"+wf+t{task_id}",
        position=task_id,
        is_group=False,
        is_generated=False,
        state=TaskState.READY,
        config={"operator": "echo"},
        inherited_export=None,
        retry_count=0,
        lease_token=token,
        lost_count=0,
        not_before=None,
        params=None,
        result=None,
        output_params=None,
        error=None,
        started_at=None,
        finished_at=None,
        updated_at=NOW,
    )


def test_a_queued_run_is_known_under_its_token_only_as_queued_then_running() -> None:
    runs = QueuedRuns()
    runs.queued(ready_task(1), 4, {"k": 1}, NOW)

    known = runs.get(1, 4)
    assert known is not None
    assert (known.state, known.lease_token, known.params, known.started_at) == (
        TaskState.QUEUED,
        4,
        {"k": 1},
        NOW,
    )
    assert runs.get(1, 3) is None
    assert runs.get(1, 5) is None

    runs.started(1, 4)
    started = runs.get(1, 4)
    assert started is not None and started.state is TaskState.RUNNING

    runs.forget(1)
    assert runs.get(1, 4) is None


def test_a_start_under_another_token_changes_nothing() -> None:
    runs = QueuedRuns()
    runs.queued(ready_task(1), 4, None, NOW)
    runs.started(1, 3)
    known = runs.get(1, 4)
    assert known is not None and known.state is TaskState.QUEUED


def test_at_most_the_limit_is_kept_the_oldest_forgotten_first() -> None:
    runs = QueuedRuns(limit=3)
    for task_id in range(1, 6):
        runs.queued(ready_task(task_id), 1, None, NOW)
    assert len(runs) == 3
    assert [runs.get(i, 1) is not None for i in range(1, 6)] == [False, False, True, True, True]


def test_runs_no_agent_started_yet_are_counted_until_they_start_or_end() -> None:
    runs = QueuedRuns(limit=3)
    for task_id in range(1, 4):
        runs.queued(ready_task(task_id), 1, None, NOW)
    assert runs.waiting == 3
    runs.started(1, 1)
    runs.started(1, 1)  # a start applied twice counts once
    runs.started(2, 9)  # another token's start: not this run
    assert runs.waiting == 2
    runs.forget(1)  # a started run ended
    runs.forget(2)  # a run ended before its start was seen
    assert runs.waiting == 1
    runs.queued(ready_task(3), 2, None, NOW)  # queued again under a new token
    assert runs.waiting == 1
    for task_id in range(4, 8):
        runs.queued(ready_task(task_id), 1, None, NOW)  # the oldest are forgotten
    assert (len(runs), runs.waiting) == (3, 3)
    runs.clear()
    assert runs.waiting == 0
