"""The Pools page: every pool with its slots, use, waiting tasks and what is free (a name
tasks wait for without a pool shows its slots missing); an admin sets and deletes a pool
from it, a bad value is shown beside its field and changes nothing, and others see no
form. The attempt page says which pool a ready task waits for."""

from __future__ import annotations

import pytest
from apiflask import APIFlask
from flask.testing import FlaskClient
from sqlalchemy import Engine, select, update

from tests.api._seed import add_pushed_run
from tests.api.conftest import Pusher
from tests.api.test_tokens import client_with, create
from tests.support.history_seed import Run
from tickwork.shared.domain.states import AttemptState, TaskState
from tickwork.shared.store.tables import audit_events, tasks


def flashes(api: FlaskClient) -> list[str]:
    """The flash messages waiting for the next page (taken: the next call sees new ones)."""
    with api.session_transaction("/ui/") as session:  # the UI cookie is for /ui only
        return [message for _, message in session.pop("_flashes", [])]


def page(client: FlaskClient) -> str:
    response = client.get("/ui/pools")
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_data(as_text=True)


@pytest.fixture
def waiting_run(push: Pusher, engine: Engine) -> Run:
    """A running attempt of ``demo`` whose last task is ready, waiting for pool ``reports``."""
    assert push("demo").status_code == 201
    run = add_pushed_run(engine, "demo", "daily", state=AttemptState.RUNNING)
    with engine.begin() as conn:
        conn.execute(
            update(tasks)
            .where(tasks.c.id == run.task_ids[-1])
            .values(state=TaskState.READY.value, pool="reports", started_at=None, finished_at=None)
        )
    return run


class TestList:
    def test_without_pools_the_page_says_so_and_offers_the_form(self, api: FlaskClient) -> None:
        html = page(api)
        assert "No pool yet, and no task names one." in html
        assert 'action="/ui/pools"' in html and 'name="slots"' in html

    @pytest.mark.usefixtures("waiting_run")
    def test_a_name_tasks_wait_for_shows_its_slots_missing(self, api: FlaskClient) -> None:
        html = page(api)
        assert "<code>reports</code>" in html
        assert "missing" in html and "no pool of this name is set" in html
        assert "Delete pool reports" not in html  # nothing to delete

    def test_each_pool_shows_its_numbers_and_description(self, api: FlaskClient) -> None:
        body = {"slots": 3, "description": "the <reporting> database"}
        assert api.put("/api/pools/reports", json=body).status_code == 201
        html = page(api)
        row = html[html.index("<code>reports</code>") :].split("</tr>", 1)[0]
        cells = [cell.split("</td>", 1)[0].strip() for cell in row.split("<td>")[1:6]]
        assert cells == ["3", "0", "0", "3", "the &lt;reporting&gt; database"]
        assert 'aria-label="Delete pool reports"' in html


class TestForms:
    def test_an_admin_creates_then_changes_a_pool(self, api: FlaskClient) -> None:
        form = {"name": "reports", "slots": "2", "description": "reporting"}
        created = api.post("/ui/pools", data=form)
        assert created.status_code == 303 and created.headers["Location"].endswith("/ui/pools")
        assert flashes(api) == ["Created pool reports: 2 slots, 0 in use."]
        changed = api.post("/ui/pools", data={"name": "reports", "slots": "5"})
        assert changed.status_code == 303
        assert flashes(api) == ["Set pool reports: 5 slots, 0 in use."]
        pool = api.get("/api/pools/reports").get_json()
        assert (pool["slots"], pool["description"]) == (5, "reporting")

    @pytest.mark.parametrize(
        ("form", "field", "words"),
        [
            ({"name": "reports", "slots": "-1"}, "slots", "greater than or equal to 0"),
            ({"name": "reports", "slots": "many"}, "slots", "valid integer"),
            ({"name": "reports"}, "slots", "Field required"),
            ({"name": "re ports", "slots": "2"}, "name", "a letter or digit"),
            ({"slots": "2"}, "name", "missing"),
            ({"name": "reports", "slots": "2", "description": "x" * 501}, "description", "500"),
        ],
    )
    def test_a_bad_value_is_shown_beside_its_field_and_changes_nothing(
        self, api: FlaskClient, form: dict[str, str], field: str, words: str
    ) -> None:
        response = api.post("/ui/pools", data=form)
        assert response.status_code == 400
        html = response.get_data(as_text=True)
        error = html.split(f'id="pool-{field}-error" class="field-error">', 1)[1].split("</p>")[0]
        assert words in error
        assert api.get("/api/pools").get_json()["items"] == []

    def test_an_admin_deletes_a_pool(self, api: FlaskClient) -> None:
        assert api.put("/api/pools/reports", json={"slots": 2}).status_code == 201
        deleted = api.post("/ui/pools/reports/delete")
        assert deleted.status_code == 303
        assert flashes(api) == ["Deleted pool reports: its tasks wait until it is set again."]
        assert api.get("/api/pools").get_json()["items"] == []
        assert api.post("/ui/pools/reports/delete").status_code == 404

    def test_a_change_from_the_page_is_audited_as_a_pool_change(
        self, api: FlaskClient, engine: Engine
    ) -> None:
        assert api.post("/ui/pools", data={"name": "reports", "slots": "2"}).status_code == 303
        assert api.post("/ui/pools/reports/delete").status_code == 303
        with engine.connect() as conn:
            rows = conn.execute(select(audit_events).order_by(audit_events.c.id)).all()
        assert [(r.action, r.target, r.project, r.outcome) for r in rows] == [
            ("pool.set", "pool reports", None, "ok"),
            ("pool.delete", "pool reports", None, "ok"),
        ]


class TestWhoMay:
    def test_a_read_token_sees_the_pools_but_no_form_and_may_not_post(
        self, api: FlaskClient, read_api: FlaskClient
    ) -> None:
        assert api.put("/api/pools/reports", json={"slots": 2}).status_code == 201
        html = page(read_api)
        assert "<code>reports</code>" in html
        assert 'name="slots"' not in html and "Delete pool" not in html
        assert read_api.post("/ui/pools", data={"name": "x", "slots": "1"}).status_code == 403
        assert read_api.post("/ui/pools/reports/delete").status_code == 403
        assert [p["name"] for p in api.get("/api/pools").get_json()["items"]] == ["reports"]

    def test_an_admin_limited_to_projects_sees_no_form_and_is_refused(
        self, api_app: APIFlask, api: FlaskClient
    ) -> None:
        assert api.put("/api/pools/reports", json={"slots": 2}).status_code == 201
        secret = create(api, "demo-admin", "admin", projects=["demo"])["secret"]
        limited = client_with(api_app, secret)
        html = page(limited)
        assert "<code>reports</code>" in html and 'name="slots"' not in html
        refused = limited.post("/ui/pools/reports/delete")
        assert refused.status_code == 403
        assert "every project shares" in refused.get_data(as_text=True)
        assert api.get("/api/pools/reports").get_json()["slots"] == 2


def test_the_attempt_page_says_which_pool_a_ready_task_waits_for(
    api: FlaskClient, waiting_run: Run
) -> None:
    html = api.get(f"/ui/attempts/{waiting_run.attempt_id}").get_data(as_text=True)
    assert "waiting for pool reports" in html
    assert html.count("waiting for pool") == 1  # the running and finished tasks wait for none
    assert '"pool":"reports"' in html  # the script's task list, which renders the tree again
