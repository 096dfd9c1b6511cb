"""Specifications of /api/sessions: the list with its filters, one session, its attempts."""

from __future__ import annotations

from datetime import timedelta

import pytest
from flask.testing import FlaskClient
from sqlalchemy import Engine

from tests.api._seed import NOW, THREE_STEPS, add_project, add_sessions
from tickwork.shared.domain.states import AttemptState


@pytest.fixture
def project(engine: Engine) -> int:
    with engine.begin() as conn:
        add_project(conn, "other", {"steps": THREE_STEPS})
        return add_project(conn, "etl", {"steps": THREE_STEPS, "more": THREE_STEPS})


def ids_of(response: object) -> list[int]:
    return [int(item["id"]) for item in response.json["items"]]  # type: ignore[attr-defined]


class TestListSessions:
    def test_a_deep_page_returns_the_right_sessions(
        self, api: FlaskClient, engine: Engine, project: int
    ) -> None:
        ids = add_sessions(engine, project, "steps", 12)
        cursor, pages = None, []
        for _ in range(6):
            query = "limit=5" + (f"&cursor={cursor}" if cursor else "")
            response = api.get(f"/api/sessions?{query}")
            pages.append(ids_of(response))
            cursor = response.json["next_cursor"]
            if cursor is None:
                break
        assert pages == [ids[::-1][0:5], ids[::-1][5:10], ids[::-1][10:12]]

    def test_a_tampered_cursor_is_422_naming_it(self, api: FlaskClient, project: int) -> None:
        response = api.get("/api/sessions?cursor=not-a-cursor")
        assert response.status_code == 422
        assert response.json["errors"][0]["parameter"] == "cursor"

    def test_each_session_carries_its_last_attempt(
        self, api: FlaskClient, engine: Engine, project: int
    ) -> None:
        add_sessions(engine, project, "steps", 1, state=AttemptState.ERROR)
        (session,) = api.get("/api/sessions").json["items"]
        assert session["project"] == "etl" and session["workflow"] == "steps"
        assert session["last_attempt"]["state"] == "error"
        assert session["last_attempt"]["session_id"] == session["id"]

    def test_filters_by_project_workflow_state_and_session_time(
        self, api: FlaskClient, engine: Engine, project: int
    ) -> None:
        steps = add_sessions(engine, project, "steps", 4)
        more = add_sessions(engine, project, "more", 2, state=AttemptState.ERROR)
        assert ids_of(api.get("/api/sessions?project=etl&workflow=more")) == more[::-1]
        assert ids_of(api.get("/api/sessions?state=error")) == more[::-1]
        assert ids_of(api.get("/api/sessions?project=other")) == []
        since = (NOW + timedelta(hours=1)).isoformat()
        until = (NOW + timedelta(hours=3)).isoformat().replace("+00:00", "")  # naive: UTC
        found = api.get(
            "/api/sessions", query_string={"workflow": "steps", "from": since, "to": until}
        )
        assert ids_of(found) == steps[1:3][::-1]

    def test_parts_of_names_match_in_any_case_beside_the_exact_names(
        self, api: FlaskClient, engine: Engine, project: int
    ) -> None:
        steps = add_sessions(engine, project, "steps", 2)
        more = add_sessions(engine, project, "more", 1, state=AttemptState.ERROR)
        assert ids_of(api.get("/api/sessions?project_contains=TL")) == (steps + more)[::-1]
        assert ids_of(api.get("/api/sessions?project_contains=oth")) == []
        assert ids_of(api.get("/api/sessions?workflow_contains=OR")) == more
        assert ids_of(api.get("/api/sessions?workflow_contains=e&state=success")) == steps[::-1]
        # an exact filter keeps its meaning: "et" names no project
        assert ids_of(api.get("/api/sessions?project=et")) == []
        # LIKE's wildcards are plain characters
        assert ids_of(api.get("/api/sessions?workflow_contains=%25")) == []
        assert ids_of(api.get("/api/sessions?workflow_contains=_")) == []

    def test_the_attempts_list_takes_the_same_filters(
        self, api: FlaskClient, engine: Engine, project: int
    ) -> None:
        steps = add_sessions(engine, project, "steps", 3)
        add_sessions(engine, project, "more", 1, state=AttemptState.ERROR)
        since = (NOW + timedelta(hours=1)).isoformat()
        found = api.get(
            "/api/attempts",
            query_string={"project_contains": "ET", "workflow_contains": "tep", "from": since},
        )
        assert found.status_code == 200, found.json
        assert [int(item["session_id"]) for item in found.json["items"]] == steps[1:][::-1]
        backwards = api.get("/api/attempts?from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z")
        assert backwards.status_code == 422
        assert backwards.json["errors"][0]["parameter"] == "to"

    @pytest.mark.parametrize(
        ("query", "parameter"),
        [
            ("project_contains=" + "x" * 256, "project_contains"),
            ("from=soon", "from"),
            ("state=happy", "state"),
            ("limit=0", "limit"),
            ("limit=100000", "limit"),
            ("colour=red", "colour"),
            ("from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z", "to"),
            # times that exist only in their own zone: before year 1 or past 9999 in UTC
            ("to=0001-01-01T00:00:00%2B01:00", "to"),
            ("from=9999-12-31T23:59:59-12:00", "from"),
        ],
    )
    def test_a_bad_parameter_is_422_naming_it(
        self, api: FlaskClient, project: int, query: str, parameter: str
    ) -> None:
        response = api.get(f"/api/sessions?{query}")
        assert response.status_code == 422, response.json
        assert response.json["errors"][0]["parameter"] == parameter


class TestOneSession:
    def test_a_session_and_its_attempts(
        self, api: FlaskClient, engine: Engine, project: int
    ) -> None:
        (session_id,) = add_sessions(engine, project, "steps", 1, state=AttemptState.ERROR)
        session = api.get(f"/api/sessions/{session_id}").json
        retried = api.post(
            f"/api/attempts/{session['last_attempt']['id']}/retry", json={"mode": "all"}
        ).json
        attempts = api.get(f"/api/sessions/{session_id}/attempts").json
        assert [a["id"] for a in attempts["items"]] == [
            retried["id"],
            session["last_attempt"]["id"],
        ]
        assert attempts["next_cursor"] is None
        first_page = api.get(f"/api/sessions/{session_id}/attempts?limit=1").json
        assert [a["id"] for a in first_page["items"]] == [retried["id"]]
        second = api.get(
            f"/api/sessions/{session_id}/attempts?limit=1&cursor={first_page['next_cursor']}"
        ).json
        assert [a["id"] for a in second["items"]] == [session["last_attempt"]["id"]]
        assert api.get(f"/api/sessions/{session_id}").json["last_attempt"]["id"] == retried["id"]

    def test_an_unknown_session_is_404(self, api: FlaskClient) -> None:
        assert api.get("/api/sessions/404").status_code == 404
        assert api.get("/api/sessions/404/attempts").status_code == 404
