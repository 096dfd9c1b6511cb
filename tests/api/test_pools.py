"""Pools over REST: an admin sets a pool's slots (created, then changed) and deletes it;
every token reads them, with the slots in use, the tasks waiting and the names tasks give
that no pool has; a bad name or body is a 422 naming it and changes nothing; a read token,
and any token limited to projects, may not change a pool (every project shares it)."""

from __future__ import annotations

from typing import Any

import pytest
from apiflask import APIFlask
from flask.testing import FlaskClient
from sqlalchemy import Engine, select, update

from tests.api._seed import add_pushed_run
from tests.api.conftest import Pusher, assert_problem
from tests.api.test_tokens import client_with, create
from tickwork.shared.domain.pools import MAX_SLOTS
from tickwork.shared.domain.states import AttemptState, TaskState
from tickwork.shared.store.tables import audit_events, tasks


def pools_of(api: FlaskClient) -> list[dict[str, Any]]:
    answer = api.get("/api/pools")
    assert answer.status_code == 200, answer.get_data(as_text=True)
    items: list[dict[str, Any]] = answer.get_json()["items"]
    return items


@pytest.fixture
def pooled_tasks(push: Pusher, engine: Engine) -> None:
    """The two tasks of a running attempt of project ``demo`` in pool ``reports``: one
    running (a slot in use), one ready (waiting for a slot)."""
    assert push("demo").status_code == 201
    run = add_pushed_run(engine, "demo", "daily", state=AttemptState.RUNNING)
    _group, first, second = run.task_ids
    with engine.begin() as conn:
        for task_id, state in ((first, TaskState.RUNNING), (second, TaskState.READY)):
            conn.execute(
                update(tasks)
                .where(tasks.c.id == task_id)
                .values(state=state.value, pool="reports", finished_at=None)
            )


class TestReading:
    def test_no_pool_and_no_task_naming_one_is_an_empty_list(self, read_api: FlaskClient) -> None:
        assert pools_of(read_api) == []

    @pytest.mark.usefixtures("pooled_tasks")
    def test_a_name_tasks_wait_for_without_a_pool_is_listed_with_null_slots(
        self, read_api: FlaskClient
    ) -> None:
        assert pools_of(read_api) == [
            {
                "name": "reports",
                "slots": None,
                "used": 1,
                "waiting": 1,
                "free": 0,
                "description": None,
            }
        ]
        assert read_api.get("/api/pools/reports").get_json()["slots"] is None

    @pytest.mark.usefixtures("pooled_tasks")
    def test_a_pool_shows_its_slots_in_use_the_tasks_waiting_and_what_is_free(
        self, api: FlaskClient, read_api: FlaskClient
    ) -> None:
        assert api.put("/api/pools/reports", json={"slots": 3}).status_code == 201
        assert api.put("/api/pools/empty", json={"slots": 1}).status_code == 201
        found = {item["name"]: item for item in pools_of(read_api)}
        assert sorted(found) == ["empty", "reports"]
        assert (found["reports"]["slots"], found["reports"]["used"]) == (3, 1)
        assert (found["reports"]["waiting"], found["reports"]["free"]) == (1, 2)
        assert read_api.get("/api/pools/empty").get_json()["free"] == 1

    def test_an_unknown_pool_is_404(self, read_api: FlaskClient) -> None:
        assert "'nothing'" in assert_problem(read_api.get("/api/pools/nothing"), 404)["detail"]


class TestSetting:
    def test_a_pool_is_created_then_changed_keeping_its_description(self, api: FlaskClient) -> None:
        body = {"slots": 4, "description": "the reporting database"}
        created = api.put("/api/pools/reports", json=body)
        assert created.status_code == 201, created.get_data(as_text=True)
        assert created.get_json() == {
            "name": "reports",
            "slots": 4,
            "used": 0,
            "waiting": 0,
            "free": 4,
            "description": "the reporting database",
        }
        changed = api.put("/api/pools/reports", json={"slots": 0})
        assert changed.status_code == 200
        assert (changed.get_json()["slots"], changed.get_json()["free"]) == (0, 0)
        assert changed.get_json()["description"] == "the reporting database"
        assert api.put("/api/pools/reports", json={"slots": MAX_SLOTS}).status_code == 200

    @pytest.mark.parametrize(
        ("body", "pointer"),
        [
            ({}, "/slots"),
            ({"slots": -1}, "/slots"),
            ({"slots": MAX_SLOTS + 1}, "/slots"),
            ({"slots": "2"}, "/slots"),
            ({"slots": True}, "/slots"),
            ({"slots": 2.5}, "/slots"),
            ({"slots": None}, "/slots"),
            ({"slots": 1, "description": ""}, "/description"),
            ({"slots": 1, "description": "x" * 501}, "/description"),
            ({"slots": 1, "description": 7}, "/description"),
            ({"slots": 1, "size": 2}, "/size"),
        ],
    )
    def test_a_bad_body_is_422_naming_its_pointer_and_changes_nothing(
        self, api: FlaskClient, body: dict[str, Any], pointer: str
    ) -> None:
        problem = assert_problem(api.put("/api/pools/reports", json=body), 422)
        assert problem["errors"][0]["pointer"] == pointer
        assert pools_of(api) == []

    @pytest.mark.parametrize("body", ["[1]", "4", "null"])
    def test_a_body_that_is_not_an_object_is_refused_not_a_server_error(
        self, api: FlaskClient, body: str
    ) -> None:
        answer = api.put(
            "/api/pools/reports", data=body, headers={"Content-Type": "application/json"}
        )
        assert 400 <= answer.status_code < 500
        assert pools_of(api) == []

    @pytest.mark.parametrize("name", ["-reports", "rep%20orts", "r" * 65, "r%C3%A9ports"])
    def test_a_name_that_cannot_be_a_pool_s_is_422_naming_the_parameter(
        self, api: FlaskClient, name: str
    ) -> None:
        for method in ("PUT", "GET", "DELETE"):
            body = {"slots": 1} if method == "PUT" else None
            answer = api.open(f"/api/pools/{name}", method=method, json=body)
            problem = assert_problem(answer, 422)
            assert problem["errors"][0]["parameter"] == "pool", method
            assert "a letter or digit" in problem["detail"]
        assert pools_of(api) == []


class TestDeleting:
    def test_a_deleted_pool_is_gone_and_a_second_delete_is_404(self, api: FlaskClient) -> None:
        assert api.put("/api/pools/reports", json={"slots": 2}).status_code == 201
        deleted = api.delete("/api/pools/reports")
        assert deleted.status_code == 204 and deleted.get_data() == b""
        assert pools_of(api) == []
        assert_problem(api.delete("/api/pools/reports"), 404)
        assert_problem(api.delete("/api/pools/never"), 404)

    @pytest.mark.usefixtures("pooled_tasks")
    def test_its_tasks_keep_waiting_under_its_name_until_it_is_set_again(
        self, api: FlaskClient
    ) -> None:
        assert api.put("/api/pools/reports", json={"slots": 5}).status_code == 201
        assert api.delete("/api/pools/reports").status_code == 204
        (left,) = pools_of(api)
        assert (left["name"], left["slots"], left["waiting"]) == ("reports", None, 1)
        again = api.put("/api/pools/reports", json={"slots": 1})
        assert again.status_code == 201
        assert (again.get_json()["used"], again.get_json()["free"]) == (1, 0)


class TestWhoMay:
    def test_a_read_token_may_read_but_not_change_a_pool(
        self, api: FlaskClient, read_api: FlaskClient
    ) -> None:
        assert api.put("/api/pools/reports", json={"slots": 2}).status_code == 201
        refused = read_api.put("/api/pools/reports", json={"slots": 9})
        assert "needs an admin token" in assert_problem(refused, 403)["detail"]
        assert_problem(read_api.delete("/api/pools/reports"), 403)
        (pool,) = pools_of(read_api)
        assert pool["slots"] == 2

    def test_an_operate_token_may_not_change_a_pool(
        self, api_app: APIFlask, api: FlaskClient
    ) -> None:
        operator = client_with(api_app, create(api, "ops", "operate")["secret"])
        assert_problem(operator.put("/api/pools/reports", json={"slots": 2}), 403)
        assert pools_of(api) == []

    def test_a_token_limited_to_projects_may_read_but_not_change_a_shared_pool(
        self, api_app: APIFlask, api: FlaskClient
    ) -> None:
        assert api.put("/api/pools/reports", json={"slots": 2}).status_code == 201
        admin = client_with(
            api_app, create(api, "demo-admin", "admin", projects=["demo*"])["secret"]
        )
        for method, body in (("PUT", {"slots": 9}), ("DELETE", None)):
            answer = admin.open("/api/pools/reports", method=method, json=body)
            assert (
                "may change pools, which every project shares"
                in (assert_problem(answer, 403)["detail"])
            )
        assert admin.get("/api/pools/reports").get_json()["slots"] == 2
        assert [pool["slots"] for pool in pools_of(admin)] == [2]


def test_each_change_of_a_pool_leaves_an_audit_row_naming_the_pool(
    api: FlaskClient, read_api: FlaskClient, engine: Engine
) -> None:
    assert api.put("/api/pools/reports", json={"slots": 2}).status_code == 201
    assert api.delete("/api/pools/reports").status_code == 204
    assert read_api.put("/api/pools/reports", json={"slots": 9}).status_code == 403
    with engine.connect() as conn:
        rows = conn.execute(select(audit_events).order_by(audit_events.c.id)).all()
    assert [(r.actor, r.action, r.target, r.project, r.outcome) for r in rows] == [
        ("env:admin", "pool.set", "pool reports", None, "ok"),
        ("env:admin", "pool.delete", "pool reports", None, "ok"),
        ("env:read", "pool.set", "pool reports", None, "refused"),
    ]
    assert rows[0].params == {"body": {"slots": 2}}
