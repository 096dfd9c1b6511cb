"""The attempt read model's rules (services/api/reads/attempts.py): which failed tasks
are named, which run is a task's latest, and the state a group shows."""

from __future__ import annotations

from datetime import UTC, datetime

from tickwork.services.api.reads.attempts import (
    display_states,
    failed_tasks,
    latest_run,
    with_display_states,
)
from tickwork.shared.store.history import TaskSummary
from tickwork.shared.store.logs import RunLog

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def _task(task_id: int, parent_id: int | None, state: str, *, group: bool = False) -> TaskSummary:
    name = f"+t{task_id}"
    return TaskSummary(
        task_id, parent_id, name, name, task_id, group, state, 0, None, None, None, ()
    )


def _log(log_id: int, task_id: int, token: int) -> RunLog:
    return RunLog(
        log_id, task_id, "+t", token, f"1/t.{task_id}.{token}.log", 0, 0, 0, NOW, None, None
    )


class TestFailedTasks:
    def test_a_group_that_failed_because_a_child_did_is_not_named(self) -> None:
        tasks = with_display_states(
            [
                _task(1, None, "error", group=True),
                _task(2, 1, "success"),
                _task(3, 1, "error"),
                _task(4, 1, "canceled"),
            ]
        )
        assert [t.id for t in failed_tasks(tasks)] == [3]

    def test_every_failed_leaf_is_named(self) -> None:
        tasks = with_display_states(
            [_task(1, None, "error", group=True), _task(2, 1, "error"), _task(3, 1, "error")]
        )
        assert [t.id for t in failed_tasks(tasks)] == [2, 3]


class TestLatestRun:
    def test_the_latest_run_is_the_one_of_the_highest_lease_token(self) -> None:
        logs = [_log(10, 7, 3), _log(11, 7, 2), _log(12, 8, 9)]
        found = latest_run(logs, 7)
        assert found is not None and found.id == 10

    def test_a_task_without_a_log_has_no_latest_run(self) -> None:
        assert latest_run([_log(10, 7, 1)], 8) is None


class TestDisplayStates:
    def test_a_planned_group_whose_child_runs_shows_running(self) -> None:
        tasks = [
            _task(1, None, "planned", group=True),
            _task(2, 1, "success"),
            _task(3, 1, "running"),
        ]
        assert display_states(tasks)[1] == "running"

    def test_running_reaches_every_ancestor(self) -> None:
        tasks = [
            _task(1, None, "planned", group=True),
            _task(2, 1, "planned", group=True),
            _task(3, 2, "running"),
        ]
        assert display_states(tasks) == {1: "running", 2: "running", 3: "running"}

    def test_a_running_child_outranks_a_queued_one(self) -> None:
        tasks = [
            _task(1, None, "planned", group=True),
            _task(2, 1, "queued"),
            _task(3, 1, "running"),
        ]
        assert display_states(tasks)[1] == "running"

    def test_a_group_that_ended_keeps_its_own_state(self) -> None:
        tasks = [_task(1, None, "error", group=True), _task(2, 1, "running")]
        assert display_states(tasks)[1] == "error"

    def test_a_planned_group_of_waiting_children_stays_planned(self) -> None:
        tasks = [_task(1, None, "planned", group=True), _task(2, 1, "blocked")]
        assert display_states(tasks)[1] == "planned"
