"""Actions from the UI: start a workflow from its form, retry an attempt (all, failed, from
a task) and kill one, each saying what it did; an unconfirmed kill or retry-all asks first."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import Engine

from tests.api._seed import THREE_STEPS, add_project, set_state
from tests.api.test_attempts import add_task_rows
from tickwork.shared.domain.states import AttemptState, TaskState

START = "/ui/projects/etl/workflows/steps/start"


@pytest.fixture
def project(engine: Engine) -> int:
    with engine.begin() as conn:
        return add_project(conn, "etl", {"steps": THREE_STEPS}, default_params={"region": "eu"})


def flashes(api: FlaskClient) -> list[tuple[str, str]]:
    """The flash messages waiting for the next page (taken: the next call sees new ones)."""
    with api.session_transaction("/ui/") as session:  # the UI cookie is for /ui only
        return [(kind, message) for kind, message in session.pop("_flashes", [])]


def attempts(api: FlaskClient) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = api.get("/api/attempts").get_json()["items"]
    return items


def started(api: FlaskClient, **form: Any) -> int:
    response = api.post(START, data=form)
    assert response.status_code == 303, response.get_data(as_text=True)
    flashes(api)  # what the start said is not what a test after it looks at
    return int(response.headers["Location"].rsplit("/", 1)[1])


class TestStart:
    def test_the_form_offers_the_session_time_and_empty_param_rows(
        self, api: FlaskClient, project: int
    ) -> None:
        html = api.get(START).get_data(as_text=True)
        assert 'name="session_time" type="text" value="now"' in html
        assert html.count('name="param_key"') == 5
        assert 'name="csrf_token"' in html

    def test_starting_creates_an_attempt_with_the_params_and_leads_to_it(
        self, api: FlaskClient, project: int
    ) -> None:
        form = {
            "session_time": "2026-01-01 07:00:00",
            "param_key": ["day", "", "nested.key"],
            "param_value": ["mon", "", "v"],
        }
        response = api.post(START, data=form)
        assert response.status_code == 303
        attempt = attempts(api)[0]
        assert response.headers["Location"] == f"/ui/attempts/{attempt['id']}"
        assert attempt["session_time"] == "2026-01-01T07:00:00Z"
        assert attempt["params"] == {"region": "eu", "day": "mon", "nested": {"key": "v"}}
        assert flashes(api) == [("success", f"Started attempt {attempt['id']} of etl/steps.")]

    def test_params_as_json_keep_their_types_and_the_rows_go_over_them(
        self, api: FlaskClient, project: int
    ) -> None:
        form = {
            "params_json": '{"limits": {"rows": 1000, "tags": ["a", "b"]}, "day": "sun"}',
            "param_key": ["day", "limits.strict"],
            "param_value": ["mon", "yes"],
        }
        response = api.post(START, data=form)
        assert response.status_code == 303, response.get_data(as_text=True)
        assert attempts(api)[0]["params"] == {
            "region": "eu",
            "day": "mon",
            "limits": {"rows": 1000, "tags": ["a", "b"], "strict": "yes"},
        }

    def test_a_refused_form_keeps_the_params_json_entered(
        self, api: FlaskClient, project: int
    ) -> None:
        response = api.post(START, data={"session_time": "someday", "params_json": '{"x": 1}'})
        assert response.status_code == 400
        assert "{&#34;x&#34;: 1}</textarea>" in response.get_data(as_text=True)

    def test_the_session_time_takes_the_clis_keywords(self, api: FlaskClient, project: int) -> None:
        started(api, session_time="daily")
        assert attempts(api)[0]["session_time"].endswith("T00:00:00Z")

    def test_a_session_that_exists_is_explained_with_a_link_to_its_attempt(
        self, api: FlaskClient, project: int
    ) -> None:
        first = started(api, session_time="2026-01-01")
        again = api.post(START, data={"session_time": "2026-01-01"})
        assert again.status_code == 409
        html = again.get_data(as_text=True)
        assert "That session exists already" in html
        assert f'href="/ui/attempts/{first}"' in html
        assert len(attempts(api)) == 1

    @pytest.mark.parametrize(
        ("form", "shown"),
        [
            ({"session_time": "someday"}, "Session time: expected an ISO 8601 time like"),
            ({"session_time": "last"}, "Session time: &#39;last&#39; is the workflow"),
            ({"param_key": "", "param_value": "orphan"}, "Params: row 1: the value"),
            ({"param_key": ["a", "a.b"], "param_value": ["1", "2"]}, "Params: &#39;a.b&#39; nests"),
            ({"param_key": "a..b", "param_value": "1"}, "Params: a key has an empty part"),
            ({"params_json": '{"a": 1,}'}, "Params as JSON: not JSON at line 1 column 9"),
            ({"params_json": "[1, 2]"}, "Params as JSON: must be a JSON object ({...}), not an"),
            (
                {"params_json": '{"a": 1}', "param_key": "a.b", "param_value": "2"},
                "Params: &#39;a.b",
            ),
        ],
    )
    def test_a_bad_value_is_named_on_the_form_and_starts_nothing(
        self, api: FlaskClient, project: int, form: dict[str, Any], shown: str
    ) -> None:
        response = api.post(START, data=form)
        assert response.status_code == 400
        assert shown in response.get_data(as_text=True)
        assert attempts(api) == []

    def test_an_unknown_workflow_is_a_404(self, api: FlaskClient, project: int) -> None:
        assert api.get("/ui/projects/etl/workflows/nope/start").status_code == 404


@pytest.fixture
def failed(api: FlaskClient, engine: Engine, project: int) -> int:
    """An attempt of etl/steps that failed at +third after +first and +second succeeded."""
    attempt_id = started(api, session_time="2026-01-01")
    add_task_rows(engine, attempt_id)
    with engine.begin() as conn:
        set_state(conn, attempt_id, AttemptState.ERROR)
    return attempt_id


class TestRetry:
    def test_retrying_from_a_task_runs_it_and_what_follows(
        self, api: FlaskClient, failed: int
    ) -> None:
        response = api.post(f"/ui/attempts/{failed}/retry", data={"mode": "from", "from": "+third"})
        assert response.status_code == 303
        new = attempts(api)[0]
        assert response.headers["Location"] == f"/ui/attempts/{new['id']}"
        assert new["resume_only"] == ["+steps+first", "+steps+second"]
        assert flashes(api) == [
            ("success", f"Retrying attempt {failed} (+third) as attempt {new['id']}.")
        ]

    def test_retrying_what_failed(self, api: FlaskClient, failed: int) -> None:
        api.post(f"/ui/attempts/{failed}/retry", data={"mode": "failed"})
        assert attempts(api)[0]["resume_from_attempt_id"] == str(failed)

    def test_retry_all_asks_first_and_runs_once_confirmed(
        self, api: FlaskClient, failed: int
    ) -> None:
        asked = api.post(f"/ui/attempts/{failed}/retry", data={"mode": "all"})
        assert asked.status_code == 200
        assert 'name="confirmed" value="yes"' in asked.get_data(as_text=True)
        assert len(attempts(api)) == 1
        done = api.post(f"/ui/attempts/{failed}/retry", data={"mode": "all", "confirmed": "yes"})
        assert done.status_code == 303
        assert len(attempts(api)) == 2

    def test_a_retry_refused_by_the_store_says_why(self, api: FlaskClient, project: int) -> None:
        running = started(api, session_time="2026-01-01")
        response = api.post(f"/ui/attempts/{running}/retry", data={"mode": "failed"})
        assert response.headers["Location"] == f"/ui/attempts/{running}"
        [(kind, message)] = flashes(api)
        assert kind == "error" and message.startswith("Not retried:")
        bad = api.post(f"/ui/attempts/{running}/retry", data={"mode": "from", "from": "+nope"})
        assert bad.status_code == 303
        assert flashes(api)[0][1].startswith("Not retried:")
        assert len(attempts(api)) == 1

    def test_the_retry_page_chooses_the_failed_task(self, api: FlaskClient, failed: int) -> None:
        html = api.get(f"/ui/attempts/{failed}/retry?mode=from").get_data(as_text=True)
        assert '<option value="+steps+third" selected>' in html
        assert 'id="mode-from" name="mode" value="from" checked' in html


class TestKill:
    def test_a_kill_asks_first_then_kills(self, api: FlaskClient, project: int) -> None:
        attempt_id = started(api, session_time="2026-01-01")
        asked = api.get(f"/ui/attempts/{attempt_id}/kill")
        assert "Kill attempt" in asked.get_data(as_text=True)
        unconfirmed = api.post(f"/ui/attempts/{attempt_id}/kill")
        assert unconfirmed.status_code == 200
        assert attempts(api)[0]["state"] == "created"

        killed = api.post(f"/ui/attempts/{attempt_id}/kill", data={"confirmed": "yes"})
        assert killed.status_code == 303
        assert killed.headers["Location"] == f"/ui/attempts/{attempt_id}"
        assert attempts(api)[0]["state"] in ("canceling", "killed")
        assert flashes(api)[0][1].startswith(f"Killing attempt {attempt_id}")

    def test_killing_an_ended_attempt_says_it_cannot(self, api: FlaskClient, failed: int) -> None:
        api.post(f"/ui/attempts/{failed}/kill", data={"confirmed": "yes"})
        [(kind, message)] = flashes(api)
        assert kind == "error" and message.startswith("Not killed:")


class TestAttemptActionsPartial:
    def render(self, api_app: Any, attempt: Any, tasks: list[Any]) -> str:
        from flask import render_template

        with api_app.test_request_context("/ui/attempts/1"):
            return render_template(
                "ui/_attempt_actions.html", attempt=attempt, tasks=tasks, can_act=True
            )

    def test_a_running_attempt_offers_kill_with_a_confirmation(self, api_app: Any) -> None:
        html = self.render(api_app, {"id": 7, "state": "running"}, [])
        assert 'action="/ui/attempts/7/kill"' in html and "data-confirm=" in html
        assert "Retry" not in html

    def test_an_ended_attempt_offers_the_retries_from_its_failed_task(self, api_app: Any) -> None:
        tasks = [
            {"full_name": "+wf", "state": "error"},
            {"full_name": "+wf+a", "state": "success"},
            {"full_name": "+wf+b", "state": "error"},
        ]
        html = self.render(api_app, {"id": 7, "state": "error"}, tasks)
        assert "Retry failed" in html and "Retry all" in html
        assert '<option value="+wf+b" selected>' in html
        assert "/kill" not in html

    def test_the_tasks_may_be_nodes_of_the_task_tree(self, api_app: Any) -> None:
        tasks = [
            SimpleNamespace(task=SimpleNamespace(full_name="+wf", state=TaskState.ERROR)),
            SimpleNamespace(task=SimpleNamespace(full_name="+wf+b", state=TaskState.ERROR)),
        ]
        attempt = SimpleNamespace(id=7, state=AttemptState.ERROR)
        html = self.render(api_app, attempt, tasks)
        assert '<option value="+wf+b" selected>' in html

    def test_nothing_is_offered_to_who_cannot_act(self, api_app: Any) -> None:
        from flask import render_template

        with api_app.test_request_context("/ui/attempts/1"):
            html = render_template(
                "ui/_attempt_actions.html",
                attempt={"id": 7, "state": "error"},
                tasks=[],
                can_act=False,
            )
        assert "<form" not in html
