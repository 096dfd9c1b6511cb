"""How ``tickwork tasks`` lays out an attempt's task tree (services/cli/tasks.py)."""

from __future__ import annotations

from typing import Any

from tickwork.services.cli.tasks import current_error, state_text, tree_order
from tickwork.shared.display import duration_text


def _task(task_id: int, parent_id: int | None, position: int) -> dict[str, Any]:
    parent = None if parent_id is None else str(parent_id)
    return {"id": str(task_id), "parent_id": parent, "position": position}


class TestTreeOrder:
    def test_children_come_right_after_their_parent_in_their_order(self) -> None:
        # Given tasks listed in creation order: every child of the root before grandchildren
        tasks = [
            _task(1, None, 0),
            _task(2, 1, 0),
            _task(3, 1, 1),
            _task(4, 2, 1),
            _task(5, 2, 0),
        ]
        order = [(depth, task["id"]) for depth, task in tree_order(tasks)]
        assert order == [(0, "1"), (1, "2"), (2, "5"), (2, "4"), (1, "3")]

    def test_a_task_whose_parent_is_not_listed_is_a_root(self) -> None:
        order = [(depth, task["id"]) for depth, task in tree_order([_task(7, 99, 0)])]
        assert order == [(0, "7")]


class TestCurrentError:
    def test_a_task_that_succeeded_on_a_retry_has_no_current_error(self) -> None:
        task = {"state": "success", "error": {"message": "first try failed"}}
        assert current_error(task) is None

    def test_a_task_waiting_to_retry_shows_the_error_it_had(self) -> None:
        task = {"state": "retry_waiting", "error": {"message": "timeout\ndetails"}}
        assert current_error(task) == "timeout"

    def test_a_failed_task_shows_its_error(self) -> None:
        assert current_error({"state": "error", "error": {"message": "exit 3"}}) == "exit 3"


class TestStateText:
    def test_a_ready_task_of_a_pool_says_which_pool_it_waits_for(self) -> None:
        assert state_text({"state": "ready", "pool": "db"}) == "ready (waiting for pool db)"

    def test_a_task_in_flight_or_of_no_pool_shows_its_state_alone(self) -> None:
        assert state_text({"state": "running", "pool": "db"}) == "running"
        assert state_text({"state": "ready", "pool": None}) == "ready"


def test_durations_read_in_seconds_minutes_and_hours_as_the_web_ui_shows_them() -> None:
    assert [duration_text(s) for s in (None, 0.25, 12.4, 185, 7390)] == [
        "-",
        "0.2s",
        "12.4s",
        "3m 05s",
        "2h 03m",
    ]
