"""Schedules over REST: list, show, pause, resume, skip and backfill, and the bad inputs
each refuses without changing anything."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.api.conftest import DAILY_WORKFLOW, Pusher, assert_problem

START = "2026-01-01T00:00:00+09:00"


@pytest.fixture
def schedule(push: Pusher, api: FlaskClient) -> dict[str, Any]:
    """The schedule of a daily workflow (07:00 Asia/Tokyo) starting at START."""
    assert push("demo", schedule_from=START).status_code == 201
    item: dict[str, Any] = api.get("/api/schedules").get_json()["items"][0]
    return item


def sessions_of(api: FlaskClient) -> int:
    """How many sessions the project's workflow has (from the workflow list)."""
    item = api.get("/api/workflows").get_json()["items"][0]
    return 0 if item["last_session"] is None else 1


class TestReading:
    def test_a_schedule_shows_its_times_in_its_zone(self, schedule: dict[str, Any]) -> None:
        assert schedule["project"] == "demo"
        assert schedule["workflow"] == "daily"
        assert schedule["timezone"] == "Asia/Tokyo"
        assert schedule["schedule"] == "daily>: 07:00:00"
        assert schedule["next_session_time"] == START
        assert schedule["checkpoint"] == "2025-12-31T23:59:59.999999+09:00"
        assert (schedule["paused"], schedule["disabled"], schedule["failures"]) == (
            False,
            False,
            0,
        )

    def test_the_list_filters_by_project_and_workflow(
        self, push: Pusher, api: FlaskClient, schedule: dict[str, Any]
    ) -> None:
        push("other", {"nightly.dig": DAILY_WORKFLOW})
        assert len(api.get("/api/schedules").get_json()["items"]) == 2
        found = api.get("/api/schedules?project=demo&workflow=daily").get_json()["items"]
        assert [s["id"] for s in found] == [schedule["id"]]
        assert api.get("/api/schedules?project=demo&workflow=nightly").get_json()["items"] == []

    def test_q_finds_part_of_a_project_or_workflow_name_in_any_case(
        self, push: Pusher, api: FlaskClient, schedule: dict[str, Any]
    ) -> None:
        push("Other_Team", {"nightly.dig": DAILY_WORKFLOW})

        def names(q: str) -> list[str]:
            items = api.get("/api/schedules", query_string={"q": q}).get_json()["items"]
            return sorted(f"{s['project']}/{s['workflow']}" for s in items)

        assert names("DAIL") == ["demo/daily"]  # a workflow name, another case
        assert names("r_t") == ["Other_Team/nightly"]  # '_' is a character, not a wildcard
        assert names("team") == ["Other_Team/nightly"]  # a project name
        assert names("%") == []
        assert names("a") == ["Other_Team/nightly", "demo/daily"]

    def test_paused_lists_only_paused_or_unpaused_schedules(
        self, push: Pusher, api: FlaskClient, schedule: dict[str, Any]
    ) -> None:
        push("other", {"nightly.dig": DAILY_WORKFLOW})
        api.post(f"/api/schedules/{schedule['id']}/pause")

        def ids(paused: str) -> list[str]:
            items = api.get(f"/api/schedules?paused={paused}").get_json()["items"]
            return [item["id"] for item in items]

        assert ids("true") == [schedule["id"]]
        assert schedule["id"] not in ids("false") and len(ids("false")) == 1
        assert_problem(api.get("/api/schedules?paused=maybe"), 422)

    def test_a_listed_schedule_says_its_state_and_its_workflows_last_session(
        self, api: FlaskClient, schedule: dict[str, Any]
    ) -> None:
        assert (schedule["state"], schedule["last_session"]) == ("active", None)
        api.post(f"/api/schedules/{schedule['id']}/pause")
        api.post("/api/attempts", json={"project": "demo", "workflow": "daily"})
        (item,) = api.get("/api/schedules").get_json()["items"]
        assert item["state"] == "paused"
        assert item["last_session"]["attempt_id"] is not None
        assert item["last_session"]["session_time"].endswith("+09:00")  # in its zone

    def test_one_schedule_shows_its_next_session_times_and_when_they_run(
        self, api: FlaskClient, schedule: dict[str, Any]
    ) -> None:
        body = api.get(f"/api/schedules/{schedule['id']}").get_json()
        assert [t["session_time"] for t in body["next_times"][:2]] == [
            "2026-01-01T00:00:00+09:00",
            "2026-01-02T00:00:00+09:00",
        ]
        assert len(body["next_times"]) == 5

    def test_one_schedule_shows_its_missed_times(
        self, api: FlaskClient, schedule: dict[str, Any]
    ) -> None:
        api.post(f"/api/schedules/{schedule['id']}/skip", json={"count": 2})
        body = api.get(f"/api/schedules/{schedule['id']}").get_json()
        assert body["missed"] == [
            {
                "first_session_time": "2026-01-01T00:00:00+09:00",
                "last_session_time": "2026-01-02T00:00:00+09:00",
                "count": 2,
                "reason": "skipped",
                "recorded_at": body["missed"][0]["recorded_at"],
            }
        ]

    def test_an_unknown_schedule_is_a_404(self, api: FlaskClient) -> None:
        assert_problem(api.get("/api/schedules/4242"), 404)
        assert_problem(api.post("/api/schedules/4242/pause"), 404)
        assert_problem(api.post("/api/schedules/4242/skip", json={"count": 1}), 404)


class TestPauseAndResume:
    def test_pause_then_resume(self, api: FlaskClient, schedule: dict[str, Any]) -> None:
        path = f"/api/schedules/{schedule['id']}"
        paused = api.post(f"{path}/pause")
        assert paused.status_code == 200
        assert paused.get_json()["paused"] is True
        assert api.post(f"{path}/pause").get_json()["paused"] is True  # twice: no change
        resumed = api.post(f"{path}/resume", json={"replay": True})
        assert resumed.get_json()["paused"] is False

    def test_resume_takes_no_unknown_member(
        self, api: FlaskClient, schedule: dict[str, Any]
    ) -> None:
        path = f"/api/schedules/{schedule['id']}"
        api.post(f"{path}/pause")
        body = assert_problem(api.post(f"{path}/resume", json={"replay": True, "x": 1}), 422)
        assert body["errors"] == [{"pointer": "/x", "detail": "unknown field"}]
        assert api.get(path).get_json()["paused"] is True

    def test_replay_must_be_a_boolean(self, api: FlaskClient, schedule: dict[str, Any]) -> None:
        response = api.post(f"/api/schedules/{schedule['id']}/resume", json={"replay": [1]})
        assert assert_problem(response, 422)["errors"][0]["pointer"] == "/replay"

    def test_a_read_token_may_not_pause(
        self, read_api: FlaskClient, schedule: dict[str, Any]
    ) -> None:
        assert_problem(read_api.post(f"/api/schedules/{schedule['id']}/pause"), 403)


class TestSkip:
    def test_skip_a_count_moves_the_checkpoint(
        self, api: FlaskClient, schedule: dict[str, Any]
    ) -> None:
        body = api.post(f"/api/schedules/{schedule['id']}/skip", json={"count": 3}).get_json()
        assert body["skipped"] == 3
        assert body["first_session_time"] == "2026-01-01T00:00:00+09:00"
        assert body["last_session_time"] == "2026-01-03T00:00:00+09:00"
        assert body["schedule"]["checkpoint"] == "2026-01-03T00:00:00+09:00"

    def test_skip_to_a_time_read_in_the_schedules_zone(
        self, api: FlaskClient, schedule: dict[str, Any]
    ) -> None:
        response = api.post(f"/api/schedules/{schedule['id']}/skip", json={"to": "2026-01-03"})
        assert response.get_json()["skipped"] == 2

    @pytest.mark.parametrize(
        ("body", "pointer"),
        [
            ({}, ""),
            ({"to": "2026-01-03", "count": 1}, ""),
            ({"count": 0}, "/count"),
            ({"count": "two"}, "/count"),
            ({"to": "yesterday"}, "/to"),
            ({"to": "2026-01-03", "zone": "UTC"}, "/zone"),
        ],
    )
    def test_a_bad_skip_is_refused_with_its_pointer_and_changes_nothing(
        self, api: FlaskClient, schedule: dict[str, Any], body: dict[str, Any], pointer: str
    ) -> None:
        path = f"/api/schedules/{schedule['id']}"
        problem = assert_problem(api.post(f"{path}/skip", json=body), 422)
        assert problem["errors"][0]["pointer"] == pointer
        assert api.get(path).get_json()["checkpoint"] == schedule["checkpoint"]


class TestBackfill:
    def test_a_backfill_creates_the_sessions_of_a_range(
        self, api: FlaskClient, schedule: dict[str, Any]
    ) -> None:
        path = f"/api/schedules/{schedule['id']}/backfill"
        response = api.post(path, json={"from": "2026-11-01", "to": "2026-11-03"})
        assert response.status_code == 201
        body = response.get_json()
        assert body["created"] == [
            "2026-11-01T00:00:00+09:00",
            "2026-11-02T00:00:00+09:00",
            "2026-11-03T00:00:00+09:00",
        ]
        assert body["backfill_id"] is not None
        # Again: the sessions exist, nothing is created
        again = api.post(path, json={"from": "2026-11-01", "to": "2026-11-03", "parallel": True})
        assert again.status_code == 200
        assert again.get_json()["created"] == []
        assert len(again.get_json()["existing"]) == 3

    def test_a_backfill_by_count(self, api: FlaskClient, schedule: dict[str, Any]) -> None:
        path = f"/api/schedules/{schedule['id']}/backfill"
        body = api.post(path, json={"from": "2026-11-01T00:00:00+09:00", "count": 2}).get_json()
        assert body["created"] == ["2026-11-01T00:00:00+09:00", "2026-11-02T00:00:00+09:00"]

    def test_a_dry_run_creates_nothing(self, api: FlaskClient, schedule: dict[str, Any]) -> None:
        path = f"/api/schedules/{schedule['id']}/backfill"
        response = api.post(path, json={"from": "2026-11-01", "count": 2, "dry_run": True})
        assert response.status_code == 200
        assert len(response.get_json()["created"]) == 2
        assert sessions_of(api) == 0

    @pytest.mark.parametrize(
        ("body", "pointer"),
        [
            ({"to": "2026-11-03"}, "/from"),
            ({"from": "2026-11-01"}, ""),
            ({"from": "2026-11-01", "to": "2026-11-03", "count": 2}, ""),
            ({"from": "2026-11-03", "to": "2026-11-01"}, "/to"),
            ({"from": "2026-11-01", "to": "2999-01-01"}, "/to"),
            ({"from": "2999-01-01", "count": 1}, "/from"),
            ({"from": "not a time", "count": 1}, "/from"),
            ({"from": "0001-01-01T00:00:00+14:00", "count": 1}, "/from"),
            ({"from": "2026-11-01", "count": 1, "parallel": "sometimes"}, "/parallel"),
            ({"from": "2026-11-01", "count": 1, "extra": True}, "/extra"),
            ({"from": "2026-11-01'; DELETE FROM sessions; --", "count": 1}, "/from"),
            # more daily session times than one backfill makes (MAX_BACKFILL)
            ({"from": "1700-01-01", "to": "2026-11-01", "dry_run": True}, "/to"),
        ],
    )
    def test_a_bad_backfill_is_refused_with_its_pointer_and_creates_nothing(
        self, api: FlaskClient, schedule: dict[str, Any], body: dict[str, Any], pointer: str
    ) -> None:
        response = api.post(f"/api/schedules/{schedule['id']}/backfill", json=body)
        problem = assert_problem(response, 422)
        assert problem["errors"][0]["pointer"] == pointer
        assert sessions_of(api) == 0
