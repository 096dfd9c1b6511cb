"""Times at the ends of the calendar: refused with a 422 naming the place before anything
is written, and a time stored before that rule held still renders in every list."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import Engine, func, select

from tests.api._seed import NOW, definition_id_of
from tests.api.conftest import DAILY_WORKFLOW, Pusher, assert_problem
from tickwork.shared.domain.schedule import parse_schedule
from tickwork.shared.store.sessions import ensure_session, insert_attempt
from tickwork.shared.store.tables import projects, schedules, sessions

WEST = """\
timezone: America/New_York
+hello:
  echo>: hello
"""
EAST = """\
timezone: Asia/Tokyo
+hello:
  echo>: hello
"""
WEST_DAILY = """\
timezone: America/New_York
schedule:
  daily>: "07:00:00"
+hello:
  echo>: hello
"""


def count_rows(engine: Engine, table: Any) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


class TestStartingASession:
    @pytest.mark.parametrize(
        ("zone_workflow", "session_time"),
        [
            (WEST, "0001-01-01T00:00:00Z"),  # year 0 in New York
            (WEST, "0001-01-01T00:00:00"),  # naive: read in New York, before year 1 in UTC
            (EAST, "9999-12-31T23:00Z"),  # year 10000 in Tokyo
            (EAST, "9999-12-31T23:59:59.999999+00:00"),
        ],
    )
    def test_a_time_its_zone_cannot_show_is_refused_and_nothing_is_stored(
        self,
        api: FlaskClient,
        push: Pusher,
        engine: Engine,
        zone_workflow: str,
        session_time: str,
    ) -> None:
        assert push("edge", {"w.dig": zone_workflow}).status_code == 201
        body = {"project": "edge", "workflow": "w", "session_time": session_time}
        problem = assert_problem(api.post("/api/attempts", json=body), 422)
        assert problem["errors"][0]["pointer"] == "/session_time"
        assert "out of range" in problem["detail"]
        assert count_rows(engine, sessions) == 0
        for path in ("/api/attempts", "/api/sessions", "/api/workflows"):
            assert api.get(path).status_code == 200, path

    def test_the_ends_of_the_accepted_range_are_accepted_and_listed(
        self, api: FlaskClient, push: Pusher
    ) -> None:
        assert push("west", {"w.dig": WEST}).status_code == 201
        assert push("east", {"w.dig": EAST}).status_code == 201
        early = {"project": "west", "workflow": "w", "session_time": "0001-01-02T00:00:00Z"}
        late = {"project": "east", "workflow": "w", "session_time": "9999-12-30T23:59:59Z"}
        assert api.post("/api/attempts", json=early).status_code == 201
        started = api.post("/api/attempts", json=late)
        assert started.status_code == 201
        assert started.get_json()["session_time"] == "9999-12-31T08:59:59+09:00"
        assert len(api.get("/api/attempts").get_json()["items"]) == 2
        assert len(api.get("/api/sessions").get_json()["items"]) == 2


class TestSchedules:
    @pytest.mark.parametrize("schedule_from", ["9999-12-31T23:00Z", "0001-01-01T00:00Z"])
    def test_a_push_starting_schedules_off_the_calendar_is_refused(
        self, push: Pusher, api: FlaskClient, engine: Engine, schedule_from: str
    ) -> None:
        problem = assert_problem(push("demo", schedule_from=schedule_from), 422)
        assert problem["errors"][0]["parameter"] == "schedule_from"
        assert count_rows(engine, schedules) == 0
        assert api.get("/api/schedules").status_code == 200
        assert_problem(api.get("/api/projects/demo"), 404)

    @pytest.fixture
    def schedule_id(self, push: Pusher, api: FlaskClient) -> str:
        assert push("demo", {"daily.dig": DAILY_WORKFLOW}).status_code == 201
        return str(api.get("/api/schedules").get_json()["items"][0]["id"])

    @pytest.mark.parametrize(
        ("body", "pointer"),
        [
            ({"from": "0001-01-01T00:00:00Z", "count": 1}, "/from"),
            ({"from": "0001-01-01T00:00:00Z", "to": "0001-01-05T00:00:00Z"}, "/from"),
            ({"from": "0001-01-01", "to": "0001-01-05", "dry_run": True}, "/from"),
        ],
    )
    def test_a_backfill_from_year_one_is_refused_naming_from(
        self,
        api: FlaskClient,
        engine: Engine,
        schedule_id: str,
        body: dict[str, Any],
        pointer: str,
    ) -> None:
        response = api.post(f"/api/schedules/{schedule_id}/backfill", json=body)
        problem = assert_problem(response, 422)
        assert problem["errors"][0]["pointer"] == pointer
        assert count_rows(engine, sessions) == 0

    def test_a_skip_to_a_time_off_the_calendar_is_refused(
        self, api: FlaskClient, schedule_id: str
    ) -> None:
        response = api.post(f"/api/schedules/{schedule_id}/skip", json={"to": "9999-12-31T23:00"})
        problem = assert_problem(response, 422)
        assert problem["errors"][0]["pointer"] == "/to"
        assert api.get(f"/api/schedules/{schedule_id}").get_json()["missed"] == []


MINUTELY = """\
timezone: UTC
schedule:
  cron>: "* * * * *"
+hello:
  echo>: hello
"""


class TestTimesTheServerComputes:
    """Session times end at the last accepted instant: one the schedule would reach past it
    is never stored; the schedule has no next time (it is finished)."""

    def stored_next_times(self, engine: Engine) -> list[datetime | None]:
        with engine.connect() as conn:
            rows = conn.execute(select(schedules.c.next_schedule_time)).scalars()
            return list(rows)

    def test_a_push_whose_next_time_would_fall_past_the_range_stores_none(
        self, api: FlaskClient, push: Pusher, engine: Engine
    ) -> None:
        # daily at 11:00 UTC: the next one would be 9999-12-31T11:00Z
        eleven = MINUTELY.replace("* * * * *", "0 11 * * *")
        response = push("demo", {"d.dig": eleven}, schedule_from="9999-12-30T23:00Z")
        assert response.status_code == 201
        assert self.stored_next_times(engine) == [None]
        [item] = api.get("/api/schedules").get_json()["items"]
        assert item["next_session_time"] is None

    def test_a_skip_at_the_end_of_the_range_records_no_time_past_it(
        self, api: FlaskClient, push: Pusher, engine: Engine
    ) -> None:
        response = push("demo", {"m.dig": MINUTELY}, schedule_from="9999-12-30T23:59:59Z")
        assert response.status_code == 201
        schedule_id = api.get("/api/schedules").get_json()["items"][0]["id"]
        skipped = api.post(f"/api/schedules/{schedule_id}/skip", json={"count": 10000})
        assert skipped.status_code == 200, skipped.get_data(as_text=True)
        assert skipped.get_json()["skipped"] == 0
        assert api.get(f"/api/schedules/{schedule_id}").get_json()["missed"] == []

    def test_a_skip_near_the_end_of_the_range_stops_at_its_last_minute(
        self, api: FlaskClient, push: Pusher, engine: Engine
    ) -> None:
        response = push("demo", {"m.dig": MINUTELY}, schedule_from="9999-12-30T23:50Z")
        assert response.status_code == 201
        schedule_id = api.get("/api/schedules").get_json()["items"][0]["id"]
        skipped = api.post(f"/api/schedules/{schedule_id}/skip", json={"count": 10000})
        assert skipped.status_code == 200, skipped.get_data(as_text=True)
        answer = skipped.get_json()
        assert answer["skipped"] == 10
        assert answer["last_session_time"] == "9999-12-30T23:59:00+00:00"
        detail = api.get(f"/api/schedules/{schedule_id}").get_json()
        assert detail["next_session_time"] is None
        assert self.stored_next_times(engine) == [None]

    def test_a_backfill_by_count_stops_at_the_last_accepted_instant(self) -> None:
        spec = parse_schedule({"cron>": "* * * * *"}, "UTC")
        times = spec.session_times(datetime(9999, 12, 30, 23, 49, 59, tzinfo=UTC), 10000)
        assert len(times) == 10
        assert times[-1] == datetime(9999, 12, 30, 23, 59, tzinfo=UTC)


class TestARowStoredBeforeTheRule:
    """A session whose time its workflow's zone cannot show (stored by an older version)
    is shown in UTC; no list answers 500."""

    @pytest.fixture
    def stored(self, engine: Engine, push: Pusher) -> None:
        assert push("old", {"w.dig": WEST_DAILY}).status_code == 201
        with engine.begin() as conn:
            project_id = int(conn.execute(select(projects.c.id)).scalar_one())
            session_id = ensure_session(
                conn,
                project_id=project_id,
                workflow_name="w",
                session_time=datetime(1, 1, 1, tzinfo=UTC),
                now=NOW,
            )
            insert_attempt(
                conn,
                session_id=session_id,
                name="manual",
                workflow_definition_id=definition_id_of(conn, project_id, "w"),
                timezone="America/New_York",
                params={},
                now=NOW,
            )
            conn.execute(
                schedules.update().values(next_schedule_time=datetime(1, 1, 1, 3, tzinfo=UTC))
            )

    @pytest.mark.usefixtures("stored")
    def test_every_list_and_page_renders_it_in_utc(self, api: FlaskClient) -> None:
        attempts = api.get("/api/attempts")
        assert attempts.status_code == 200, attempts.get_data(as_text=True)
        attempt = attempts.get_json()["items"][0]
        assert attempt["session_time"] == "0001-01-01T00:00:00Z"
        assert api.get(f"/api/attempts/{attempt['id']}").status_code == 200
        listed = api.get("/api/sessions")
        assert listed.status_code == 200, listed.get_data(as_text=True)
        assert listed.get_json()["items"][0]["session_time"] == "0001-01-01T00:00:00Z"
        workflows = api.get("/api/workflows").get_json()["items"]
        page = api.get(f"/api/workflows/{workflows[0]['id']}")
        assert page.status_code == 200, page.get_data(as_text=True)
        assert page.get_json()["last_session"]["session_time"] == "0001-01-01T00:00:00+00:00"
        assert api.get("/api/projects/old/workflows/w").status_code == 200
        listed_schedules = api.get("/api/schedules")
        assert listed_schedules.status_code == 200, listed_schedules.get_data(as_text=True)
        item = listed_schedules.get_json()["items"][0]
        assert item["next_session_time"] == "0001-01-01T03:00:00+00:00"
        assert api.get(f"/api/schedules/{item['id']}").status_code == 200
