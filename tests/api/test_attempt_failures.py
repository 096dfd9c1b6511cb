"""Specifications of /api/attempts/{id}/failures (why an attempt failed, as every client
shows it), /api/attempts/{id}/tasks/{task_id} (one task's values and logs) and a log's
download."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import Engine, update

from tests.api._seed import (
    NOW,
    THREE_STEPS,
    add_project,
    add_sessions,
    set_state,
    store_run_log,
)
from tickwork.shared.domain.states import AttemptState
from tickwork.shared.store.tables import tasks


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


class TestLogPaneRoutes:
    """What the attempt page's log pane reads under /ui: the same records as the REST
    routes above."""

    def test_a_task_reads_as_json_with_where_its_log_stream_stands(
        self, api: FlaskClient, failed_attempt: tuple[int, int]
    ) -> None:
        attempt_id, task_id = failed_attempt
        body = api.get(f"/ui/attempts/{attempt_id}/tasks/{task_id}").json
        rest = api.get(f"/api/attempts/{attempt_id}/tasks/{task_id}").json
        assert {key: body[key] for key in rest} == rest
        assert body["stream_offset"] == body["logs"][0]["size_bytes"]

    def test_the_tail_of_a_log_reads_by_range(
        self, api: FlaskClient, failed_attempt: tuple[int, int]
    ) -> None:
        attempt_id, task_id = failed_attempt
        [log] = api.get(f"/ui/attempts/{attempt_id}/tasks/{task_id}").json["logs"]
        tail = api.get(
            f"/ui/attempts/{attempt_id}/logs/{log['id']}", headers={"Range": "bytes=-14"}
        )
        assert tail.status_code == 206
        assert tail.data == b"table missing\n"
        size = log["size_bytes"]
        assert tail.headers["Content-Range"] == f"bytes {size - 14}-{size - 1}/{size}"

    def test_a_bad_part_is_a_400_and_an_unknown_log_a_404(
        self, api: FlaskClient, failed_attempt: tuple[int, int]
    ) -> None:
        attempt_id = failed_attempt[0]
        assert api.get(f"/ui/attempts/{attempt_id}/logs/1?offset=-1").status_code == 400
        assert api.get(f"/ui/attempts/{attempt_id}/logs/1?nonsense=1").status_code == 400
        assert api.get(f"/ui/attempts/{attempt_id}/logs/999").status_code == 404
        assert api.get(f"/ui/attempts/{attempt_id}/tasks/999").status_code == 404

    def test_the_page_opens_the_first_failures_log(
        self, api: FlaskClient, failed_attempt: tuple[int, int]
    ) -> None:
        attempt_id, task_id = failed_attempt
        html = api.get(f"/ui/attempts/{attempt_id}").get_data(as_text=True)
        assert f'data-open-task="{task_id}"' in html

    def test_the_pane_offers_no_action_to_who_cannot_act(self, api_app: Any) -> None:
        from flask import render_template

        attempt = {"id": 7, "state": "error"}
        with api_app.test_request_context("/ui/attempts/7"):
            acting = render_template("ui/_attempt_pane_actions.html", attempt=attempt, can_act=True)
            reading = render_template(
                "ui/_attempt_pane_actions.html", attempt=attempt, can_act=False
            )
        assert "Retry from this task" in acting and 'name="csrf_token"' in acting
        assert "<form" not in reading


def test_a_planned_group_whose_task_runs_is_listed_as_running(
    api: FlaskClient, engine: Engine
) -> None:
    with engine.begin() as conn:
        project_id = add_project(conn, "etl", {"steps": THREE_STEPS})
    add_sessions(engine, project_id, "steps", 1, state=AttemptState.RUNNING)
    base = {"attempt_id": 1, "position": 0, "is_generated": False, "config": {}}
    with engine.begin() as conn:
        group = conn.execute(
            tasks.insert().returning(tasks.c.id),
            {**base, "full_name": "+steps", "is_group": True, "state": "planned"}
            | {"created_at": NOW, "updated_at": NOW},
        ).scalar_one()
        conn.execute(
            tasks.insert(),
            {**base, "full_name": "+steps+load", "is_group": False, "state": "running"}
            | {"parent_id": group, "created_at": NOW, "updated_at": NOW},
        )
    items = api.get("/api/attempts/1/tasks").json["items"]
    assert [(t["state"], t["display_state"]) for t in items] == [
        ("planned", "running"),
        ("running", "running"),
    ]
