"""Specifications of /api/attempts: start, look at, kill, retry, and task trees."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import Engine, func, select

from tests.api._seed import NOW, THREE_STEPS, add_project, set_state
from tests.support.statements import StatementLog
from tickwork.shared.domain.states import AttemptState
from tickwork.shared.store.engine import WORK_CHANNEL
from tickwork.shared.store.sessions import claim_session
from tickwork.shared.store.sla import insert_alert
from tickwork.shared.store.tables import sessions, task_dependencies, tasks

TOKYO_STEPS = THREE_STEPS.replace("timezone: UTC", "timezone: Asia/Tokyo")


@pytest.fixture
def project(engine: Engine) -> int:
    with engine.begin() as conn:
        workflows = {"steps": THREE_STEPS, "tokyo": TOKYO_STEPS}
        return add_project(conn, "etl", workflows, default_params={"region": "eu"})


def start(api: FlaskClient, **body: Any) -> Any:
    return api.post("/api/attempts", json={"project": "etl", "workflow": "steps", **body})


def ended(engine: Engine, attempt_id: str, state: AttemptState) -> None:
    with engine.begin() as conn:
        set_state(conn, int(attempt_id), state)


class TestStart:
    def test_a_start_answers_201_with_the_attempt(self, api: FlaskClient, project: int) -> None:
        response = start(api, session_time="2026-01-01T00:00:00+00:00", params={"x": 1})
        assert response.status_code == 201, response.json
        attempt = response.json
        assert attempt["state"] == "created"
        assert attempt["project"] == "etl" and attempt["workflow"] == "steps"
        assert attempt["params"] == {"region": "eu", "x": 1}
        assert attempt["session_time"] == "2026-01-01T00:00:00Z"
        assert api.get(f"/api/attempts/{attempt['id']}").json == {**attempt, "alerts": []}

    @pytest.mark.parametrize(
        "body",
        [
            {"workflow": "tokyo", "session_time": "2026-01-01T00:00:00"},
            {"workflow": "tokyo", "session_time": "2026-01-01T09:30:00.123456-05:00"},
            {"session_time": "2026-01-01T00:00:00Z", "idempotency_key": "key-1"},
            {
                "params": {
                    "name": "caf\u00e9 \u65e5\u672c",
                    "big": 2**62,
                    "ratio": 0.1,
                    "deep": [{}],
                }
            },
        ],
    )
    def test_a_start_answers_the_attempt_as_reading_it_back_shows_it(
        self, api: FlaskClient, project: int, body: dict[str, Any]
    ) -> None:
        # Given a start's answer, when the attempt is read back, then both say the same
        response = start(api, **body)
        assert response.status_code == 201, response.json
        attempt = response.json
        assert api.get(f"/api/attempts/{attempt['id']}").json == {**attempt, "alerts": []}
        listed = api.get("/api/sessions").json["items"]
        assert [item["last_attempt"] for item in listed] == [attempt]

    def test_a_start_of_a_session_that_has_no_attempt_gives_it_one(
        self, api: FlaskClient, engine: Engine, project: int
    ) -> None:
        # Given a session stored without an attempt
        with engine.begin() as conn:
            session_id, _ = claim_session(
                conn, project_id=project, workflow_name="steps", session_time=NOW, now=NOW
            )
        # When it is started, then its attempt is made in that session, and only there
        response = start(api, session_time=NOW.isoformat())
        assert response.status_code == 201, response.json
        assert response.json["session_id"] == str(session_id)
        assert api.get(f"/api/attempts/{response.json['id']}").json["session_id"] == str(session_id)
        with engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(sessions)).scalar_one() == 1

    def test_a_start_on_postgresql_costs_three_statements_and_wakes_executors(
        self, api: FlaskClient, engine: Engine, project: int
    ) -> None:
        if engine.dialect.name != "postgresql":
            pytest.skip("one statement for the session, its attempt and NOTIFY on PostgreSQL")
        # Given a connection listening where executors listen
        with engine.connect() as listener:
            listener = listener.execution_options(isolation_level="AUTOCOMMIT")
            listener.exec_driver_sql(f"LISTEN {WORK_CHANNEL}")
            raw = listener.connection.driver_connection
            assert raw is not None
            # When a session is started
            with StatementLog(engine) as log:
                response = start(api, session_time="2026-01-01T00:00:00Z")
            assert response.status_code == 201, response.json
            # Then the workflow is looked up, the session, attempt and wake-up written
            # in one statement, and the audit row in another; the wake-up arrives once
            assert len(log.statements) == 3, log.statements
            assert log.count("pg_notify") == 1 and log.count("INSERT INTO audit_events") == 1
            listener.exec_driver_sql("SELECT 1")
            assert [n.channel for n in raw.notifies(timeout=2, stop_after=1)] == [WORK_CHANNEL]

    def test_the_same_session_again_is_409_naming_the_existing_attempt(
        self, api: FlaskClient, project: int
    ) -> None:
        first = start(api, session_time="2026-01-01T00:00:00Z").json
        again = start(api, session_time="2026-01-01T00:00:00Z")
        assert again.status_code == 409
        assert again.json["attempt_id"] == first["id"]
        assert again.mimetype == "application/problem+json"

    def test_an_idempotency_key_used_again_is_409_naming_its_attempt(
        self, api: FlaskClient, project: int
    ) -> None:
        first = start(api, session_time="2026-01-01T00:00:00Z", idempotency_key="abc").json
        again = start(api, session_time="2026-03-01T00:00:00Z", idempotency_key="abc")
        assert again.status_code == 409
        assert again.json["attempt_id"] == first["id"]

    def test_an_unknown_project_or_workflow_is_404(self, api: FlaskClient, project: int) -> None:
        assert start(api, project="nope").status_code == 404
        response = start(api, workflow="nope")
        assert response.status_code == 404
        assert "nope" in response.json["detail"]

    @pytest.mark.parametrize(
        ("body", "pointer"),
        [
            ({"session_time": "yesterday"}, "/session_time"),
            ({"session_time": 5}, "/session_time"),
            ({"params": [1, 2]}, "/params"),
            ({"idempotency_key": ""}, "/idempotency_key"),
            ({"surprise": 1}, "/surprise"),
            # times that exist in their own zone but not in UTC, which the store holds
            ({"session_time": "0001-01-01T00:00:00+09:00"}, "/session_time"),
            ({"session_time": "9999-12-31T23:59:59-10:00"}, "/session_time"),
        ],
    )
    def test_a_bad_body_is_422_with_its_pointer_and_starts_nothing(
        self, api: FlaskClient, project: int, body: dict[str, Any], pointer: str
    ) -> None:
        response = start(api, **body)
        assert response.status_code == 422, response.json
        assert response.json["errors"][0]["pointer"] == pointer
        assert api.get("/api/attempts").json["items"] == []


class TestListAndGet:
    def test_pages_of_attempts_and_a_tampered_cursor(self, api: FlaskClient, project: int) -> None:
        ids = [
            start(api, session_time=f"2026-01-0{day}T00:00:00Z").json["id"] for day in range(1, 6)
        ]
        first = api.get("/api/attempts?limit=2").json
        second = api.get(f"/api/attempts?limit=2&cursor={first['next_cursor']}").json
        third = api.get(f"/api/attempts?limit=2&cursor={second['next_cursor']}").json
        found = [a["id"] for a in first["items"] + second["items"] + third["items"]]
        assert found == ids[::-1]
        assert third["next_cursor"] is None
        tampered = api.get("/api/attempts?cursor=" + first["next_cursor"][:-2] + "zz")
        assert tampered.status_code == 422
        assert tampered.json["errors"][0]["parameter"] == "cursor"

    def test_attempts_filter_by_state(self, api: FlaskClient, engine: Engine, project: int) -> None:
        first = start(api, session_time="2026-01-01T00:00:00Z").json
        start(api, session_time="2026-01-02T00:00:00Z")
        ended(engine, first["id"], AttemptState.ERROR)
        found = api.get("/api/attempts?state=error&project=etl").json["items"]
        assert [a["id"] for a in found] == [first["id"]]
        assert api.get("/api/attempts?state=bogus").status_code == 422

    def test_an_unknown_attempt_is_404(self, api: FlaskClient) -> None:
        assert api.get("/api/attempts/12345").status_code == 404

    def test_one_attempt_lists_its_alerts(
        self, api: FlaskClient, engine: Engine, project: int
    ) -> None:
        attempt = start(api).json
        with engine.begin() as conn:
            insert_alert(conn, int(attempt["id"]), "sla", "SLA missed: steps", NOW)
        alerts = api.get(f"/api/attempts/{attempt['id']}").json["alerts"]
        assert [(a["kind"], a["message"]) for a in alerts] == [("sla", "SLA missed: steps")]


class TestKill:
    def test_a_kill_answers_202_and_the_attempt_is_canceling(
        self, api: FlaskClient, project: int
    ) -> None:
        attempt = start(api).json
        response = api.post(f"/api/attempts/{attempt['id']}/kill")
        assert response.status_code == 202
        assert response.json["state"] == "canceling"
        assert api.get(f"/api/attempts/{attempt['id']}").json["state"] == "canceling"

    def test_a_kill_of_a_finished_attempt_is_409(
        self, api: FlaskClient, engine: Engine, project: int
    ) -> None:
        attempt = start(api).json
        ended(engine, attempt["id"], AttemptState.SUCCESS)
        response = api.post(f"/api/attempts/{attempt['id']}/kill")
        assert response.status_code == 409
        assert api.get(f"/api/attempts/{attempt['id']}").json["state"] == "success"


class TestRetry:
    def test_each_mode_makes_a_new_attempt_of_the_same_session(
        self, api: FlaskClient, engine: Engine, project: int
    ) -> None:
        attempt = start(api).json
        add_task_rows(engine, int(attempt["id"]))
        ended(engine, attempt["id"], AttemptState.ERROR)
        retried = api.post(f"/api/attempts/{attempt['id']}/retry", json={"mode": "all"})
        assert retried.status_code == 201, retried.json
        assert retried.json["session_id"] == attempt["session_id"]
        assert retried.json["name"] == "retry-1"
        assert retried.json["resume_from_attempt_id"] is None
        ended(engine, retried.json["id"], AttemptState.ERROR)

        failed = api.post(f"/api/attempts/{attempt['id']}/retry", json={"mode": "failed"})
        assert failed.status_code == 201
        assert failed.json["resume_from_attempt_id"] == attempt["id"]
        assert failed.json["resume_only"] is None
        ended(engine, failed.json["id"], AttemptState.ERROR)

        body = {"mode": "from", "from": "+third", "params": {"again": True}}
        from_task = api.post(f"/api/attempts/{attempt['id']}/retry", json=body)
        assert from_task.status_code == 201, from_task.json
        assert from_task.json["resume_only"] == ["+steps+first", "+steps+second"]
        assert from_task.json["params"] == {"region": "eu", "again": True}

    def test_a_retry_while_the_session_runs_is_409_naming_the_running_attempt(
        self, api: FlaskClient, project: int
    ) -> None:
        attempt = start(api).json
        response = api.post(f"/api/attempts/{attempt['id']}/retry", json={"mode": "all"})
        assert response.status_code == 409
        assert response.json["attempt_id"] == attempt["id"]

    def test_retrying_failed_tasks_of_a_success_is_409(
        self, api: FlaskClient, engine: Engine, project: int
    ) -> None:
        attempt = start(api).json
        ended(engine, attempt["id"], AttemptState.SUCCESS)
        response = api.post(f"/api/attempts/{attempt['id']}/retry", json={"mode": "failed"})
        assert response.status_code == 409

    @pytest.mark.parametrize(
        ("body", "pointer"),
        [
            ({"mode": "from"}, "/from"),
            ({"mode": "from", "from": "+nope"}, "/from"),
            ({"mode": "all", "from": "+first"}, "/from"),
            ({"mode": "sometimes"}, "/mode"),
            ({}, "/mode"),
        ],
    )
    def test_a_bad_retry_is_422_with_its_pointer(
        self,
        api: FlaskClient,
        engine: Engine,
        project: int,
        body: dict[str, Any],
        pointer: str,
    ) -> None:
        attempt = start(api).json
        add_task_rows(engine, int(attempt["id"]))
        ended(engine, attempt["id"], AttemptState.ERROR)
        response = api.post(f"/api/attempts/{attempt['id']}/retry", json=body)
        assert response.status_code == 422, response.json
        assert response.json["errors"][0]["pointer"] == pointer
        assert len(api.get("/api/attempts").json["items"]) == 1


def add_task_rows(engine: Engine, attempt_id: int) -> None:
    """The tree of THREE_STEPS after +third failed: +steps > first -> second -> third."""
    names = [
        ("+steps", None, "error"),
        ("+steps+first", 0, "success"),
        ("+steps+second", 0, "success"),
        ("+steps+third", 0, "error"),
    ]
    ids: list[int] = []
    with engine.begin() as conn:
        for position, (name, parent, state) in enumerate(names):
            ids.append(
                conn.execute(
                    tasks.insert().returning(tasks.c.id),
                    {
                        "attempt_id": attempt_id,
                        "parent_id": None if parent is None else ids[parent],
                        "full_name": name,
                        "position": position,
                        "is_group": parent is None,
                        "is_generated": False,
                        "state": state,
                        "config": {},
                        "created_at": NOW,
                        "updated_at": NOW,
                    },
                ).scalar_one()
            )
        conn.execute(
            task_dependencies.insert(),
            [
                {"upstream_id": ids[1], "downstream_id": ids[2]},
                {"upstream_id": ids[2], "downstream_id": ids[3]},
            ],
        )


class TestTasks:
    def test_the_task_tree_names_parents_and_upstreams(
        self, api: FlaskClient, engine: Engine, project: int
    ) -> None:
        attempt = start(api).json
        add_task_rows(engine, int(attempt["id"]))
        items = api.get(f"/api/attempts/{attempt['id']}/tasks").json["items"]
        by_name = {t["full_name"]: t for t in items}
        root, first, second = by_name["+steps"], by_name["+steps+first"], by_name["+steps+second"]
        assert root["parent_id"] is None and root["is_group"]
        assert first["parent_id"] == root["id"]
        assert second["upstream_ids"] == [first["id"]]
        assert by_name["+steps+third"]["state"] == "error"

    def test_each_task_has_its_own_name_retries_and_duration(
        self, api: FlaskClient, engine: Engine, project: int
    ) -> None:
        # Given a task that ran 90 seconds, retries included
        attempt = start(api).json
        add_task_rows(engine, int(attempt["id"]))
        with engine.begin() as conn:
            conn.execute(
                tasks.update()
                .where(tasks.c.full_name == "+steps+third")
                .values(retry_count=2, started_at=NOW, finished_at=NOW + timedelta(seconds=90))
            )
        # When the tree is read
        items = api.get(f"/api/attempts/{attempt['id']}/tasks").json["items"]
        by_name = {t["full_name"]: t for t in items}
        # Then each task carries its name within its parent, its retries and its duration
        assert by_name["+steps"]["name"] == "+steps"
        assert by_name["+steps+third"]["name"] == "+third"
        assert by_name["+steps+third"]["retry_count"] == 2
        assert by_name["+steps+third"]["duration_seconds"] == 90.0
        assert by_name["+steps+first"]["duration_seconds"] is None

    def test_the_tasks_of_an_unknown_attempt_are_404(self, api: FlaskClient) -> None:
        assert api.get("/api/attempts/77/tasks").status_code == 404
