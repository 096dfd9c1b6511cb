"""Specifications of /api/attempts/{id}/failures (why an attempt failed, as every client
shows it), /api/attempts/{id}/tasks/{task_id} (one task's values and logs) and a log's
download."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient
from sqlalchemy import Engine, update

from shared.domain.states import AttemptState
from shared.store.tables import tasks
from tests.api._seed import THREE_STEPS, add_project, add_sessions, set_state, store_run_log


@pytest.fixture
def failed_attempt(engine: Engine) -> tuple[int, int]:
    """An attempt in error whose task ``+steps+load`` failed after writing ten-odd lines;
    the attempt's and the task's ids."""
    with engine.begin() as conn:
        project_id = add_project(conn, "etl", {"steps": THREE_STEPS})
    add_sessions(engine, project_id, "steps", 1, state=AttemptState.RUNNING)
    log = "".join(f"row {n}\n" for n in range(30)).encode() + b"table missing\n"
    task_id = store_run_log(engine, 1, "+steps+load", log)
    with engine.begin() as conn:
        conn.execute(
            update(tasks)
            .where(tasks.c.id == task_id)
            .values(
                state="error",
                error={"message": "exit 3"},
                params={"day": "2026-12-01"},
                result={"store": {"rows": 30}},
                config={"export": {"target": "wh"}},
            )
        )
        set_state(conn, 1, AttemptState.ERROR)
    return 1, task_id


class TestFailures:
    def test_a_failed_task_is_named_with_its_message_and_the_end_of_its_log(
        self, api: FlaskClient, failed_attempt: tuple[int, int]
    ) -> None:
        attempt_id, task_id = failed_attempt
        body = api.get(f"/api/attempts/{attempt_id}/failures").json
        assert body["not_shown"] == 0
        [failure] = body["items"]
        assert failure["task"] == "+steps+load"
        assert failure["task_id"] == str(task_id)
        assert failure["message"] == "exit 3"
        assert failure["log_tail"][-1] == "table missing"
        assert len(failure["log_tail"]) == 10

    def test_an_attempt_that_did_not_fail_has_no_failures(
        self, api: FlaskClient, engine: Engine, failed_attempt: tuple[int, int]
    ) -> None:
        with engine.begin() as conn:
            set_state(conn, failed_attempt[0], AttemptState.SUCCESS)
        assert api.get(f"/api/attempts/{failed_attempt[0]}/failures").json["items"] == []

    def test_an_unknown_attempt_is_404(self, api: FlaskClient, engine: Engine) -> None:
        assert api.get("/api/attempts/999/failures").status_code == 404


class TestTaskDetail:
    def test_a_task_shows_its_params_stored_and_exported_values_and_logs(
        self, api: FlaskClient, failed_attempt: tuple[int, int]
    ) -> None:
        attempt_id, task_id = failed_attempt
        body = api.get(f"/api/attempts/{attempt_id}/tasks/{task_id}").json
        assert body["params"] == {"day": "2026-12-01"}
        assert body["stored"] == {"rows": 30}
        assert body["exported"] == {"target": "wh"}
        assert [log["task"] for log in body["logs"]] == ["+steps+load"]

    def test_a_task_of_another_attempt_is_404(
        self, api: FlaskClient, failed_attempt: tuple[int, int]
    ) -> None:
        assert api.get(f"/api/attempts/999/tasks/{failed_attempt[1]}").status_code == 404
        assert api.get(f"/api/attempts/{failed_attempt[0]}/tasks/999").status_code == 404


def test_a_log_downloads_whole_as_a_file(api: FlaskClient, failed_attempt: tuple[int, int]) -> None:
    attempt_id, task_id = failed_attempt
    [log] = api.get(f"/api/attempts/{attempt_id}/tasks/{task_id}").json["logs"]
    response = api.get(f"/api/logs/{attempt_id}/files/{log['id']}?download=true")
    assert response.status_code == 200
    assert response.headers["Content-Disposition"].startswith("attachment; filename=")
    assert response.data.endswith(b"table missing\n")
    assert len(response.data) == log["size_bytes"]
