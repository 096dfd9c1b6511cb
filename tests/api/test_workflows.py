"""Workflows over REST: every project's latest workflows with their schedule and last
session, and one workflow with its definition."""

from __future__ import annotations

from flask.testing import FlaskClient

from tests.api.conftest import DAILY_WORKFLOW, HELLO_WORKFLOW, Pusher, assert_problem


def test_workflows_of_every_latest_revision_are_listed(push: Pusher, api: FlaskClient) -> None:
    push("alpha", {"daily.dig": DAILY_WORKFLOW}, revision="a1")
    push("alpha", {"hello.dig": HELLO_WORKFLOW}, revision="a2")
    push("beta", {"daily.dig": DAILY_WORKFLOW}, revision="b1")
    items = api.get("/api/workflows").get_json()["items"]
    assert sorted((w["project"], w["name"], w["revision"]) for w in items) == [
        ("alpha", "hello", "a2"),
        ("beta", "daily", "b1"),
    ]


def test_the_project_filter_keeps_one_project(push: Pusher, api: FlaskClient) -> None:
    push("alpha")
    push("beta")
    items = api.get("/api/workflows?project=beta").get_json()["items"]
    assert [w["project"] for w in items] == ["beta"]
    assert api.get("/api/workflows?project=nope").get_json()["items"] == []


def test_a_scheduled_workflow_shows_its_next_times(push: Pusher, api: FlaskClient) -> None:
    push("demo", schedule_from="2026-01-01T00:00:00+09:00")
    (item,) = api.get("/api/workflows").get_json()["items"]
    assert item["schedule_id"] is not None
    assert item["next_session_time"] == "2025-12-31T15:00:00+00:00"
    assert item["next_run_time"] is not None
    assert item["paused"] is False
    assert item["last_session"] is None


def test_an_unscheduled_workflow_has_no_next_times(push: Pusher, api: FlaskClient) -> None:
    push("demo", {"hello.dig": HELLO_WORKFLOW})
    (item,) = api.get("/api/workflows").get_json()["items"]
    assert (item["schedule_id"], item["next_run_time"], item["next_session_time"]) == (
        None,
        None,
        None,
    )


def test_the_last_session_and_its_state_are_shown(push: Pusher, api: FlaskClient) -> None:
    # Given a schedule with two backfilled sessions
    push("demo")
    schedule_id = api.get("/api/schedules").get_json()["items"][0]["id"]
    api.post(
        f"/api/schedules/{schedule_id}/backfill",
        json={"from": "2026-11-01", "to": "2026-11-02"},
    )
    # When the workflows are listed
    (item,) = api.get("/api/workflows").get_json()["items"]
    # Then the newest session is shown, with its attempt's state
    last = item["last_session"]
    assert last["session_time"] == "2026-11-01T15:00:00+00:00"
    assert last["state"] == "waiting"
    assert last["attempt_id"] is not None


def test_one_workflow_shows_its_config(push: Pusher, api: FlaskClient) -> None:
    push("demo", revision="r1")
    listed = api.get("/api/workflows").get_json()["items"][0]
    body = api.get(f"/api/workflows/{listed['id']}").get_json()
    assert body["name"] == "daily"
    assert body["project"] == "demo"
    assert body["revision"] == "r1"
    assert body["timezone"] == "Asia/Tokyo"
    assert body["config"]["root"]


def test_an_old_revisions_workflow_is_still_shown_by_id(push: Pusher, api: FlaskClient) -> None:
    push("demo", revision="r1")
    old_id = api.get("/api/workflows").get_json()["items"][0]["id"]
    push("demo", {"hello.dig": HELLO_WORKFLOW}, revision="r2")
    assert api.get(f"/api/workflows/{old_id}").get_json()["revision"] == "r1"


def test_an_unknown_workflow_is_a_404(api: FlaskClient) -> None:
    assert_problem(api.get("/api/workflows/12345"), 404)
    assert_problem(api.get("/api/workflows/abc"), 404)
    assert_problem(api.get("/api/workflows/-1"), 404)


def test_workflow_pages_follow_the_cursor(push: Pusher, api: FlaskClient) -> None:
    push("demo", {"a.dig": HELLO_WORKFLOW, "b.dig": HELLO_WORKFLOW, "c.dig": HELLO_WORKFLOW})
    first = api.get("/api/workflows?limit=2").get_json()
    second = api.get(f"/api/workflows?limit=2&cursor={first['next_cursor']}").get_json()
    names = [w["name"] for w in first["items"] + second["items"]]
    assert sorted(names) == ["a", "b", "c"]
    assert second["next_cursor"] is None
