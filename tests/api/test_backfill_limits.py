"""A backfill (or its dry run) covers at most 10,000 session times (the documented
maximum), computes each once, and refuses a larger range with a 422 before doing more."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from flask.testing import FlaskClient

from tests.api.conftest import Pusher, assert_problem
from tickwork.shared.domain.schedule import ScheduleSpec
from tickwork.shared.store import emission

MAX_BACKFILL = 10_000
EVERY_MINUTE = """\
timezone: UTC
schedule:
  minutes_interval>: 1
+hello:
  echo>: hello
"""


@pytest.fixture
def schedule_id(push: Pusher, api: FlaskClient) -> str:
    assert push("demo", {"minutely.dig": EVERY_MINUTE}).status_code == 201
    return str(api.get("/api/schedules").get_json()["items"][0]["id"])


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many times a schedule computed its next session time during the test."""
    counted = [0]
    original = ScheduleSpec.next_session_time

    def counting(spec: ScheduleSpec, now: datetime) -> datetime | None:
        counted[0] += 1
        return original(spec, now)

    monkeypatch.setattr(ScheduleSpec, "next_session_time", counting)
    yield counted


def minutes_ago(minutes: int) -> str:
    moment = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=minutes)
    return moment.isoformat()


def test_the_store_holds_to_the_documented_maximum() -> None:
    assert emission.MAX_BACKFILL == MAX_BACKFILL


def test_a_dry_run_over_the_maximum_is_refused_after_at_most_that_many_steps(
    api: FlaskClient, schedule_id: str, steps: list[int]
) -> None:
    body = {"from": minutes_ago(3 * MAX_BACKFILL), "to": minutes_ago(1), "dry_run": True}
    problem = assert_problem(api.post(f"/api/schedules/{schedule_id}/backfill", json=body), 422)
    assert problem["errors"][0]["pointer"] == "/to"
    assert f"more than {MAX_BACKFILL}" in problem["detail"]
    assert steps[0] <= MAX_BACKFILL + 2


def test_a_count_over_the_maximum_is_refused_naming_count(
    api: FlaskClient, schedule_id: str
) -> None:
    body = {"from": minutes_ago(3 * MAX_BACKFILL), "count": MAX_BACKFILL + 1, "dry_run": True}
    problem = assert_problem(api.post(f"/api/schedules/{schedule_id}/backfill", json=body), 422)
    assert problem["errors"][0]["pointer"] == "/count"


def test_a_dry_run_by_count_computes_each_session_time_once(
    api: FlaskClient, schedule_id: str, steps: list[int]
) -> None:
    count = 2_000
    body = {"from": minutes_ago(3 * count), "count": count, "dry_run": True}
    response = api.post(f"/api/schedules/{schedule_id}/backfill", json=body)
    assert response.status_code == 200, response.get_data(as_text=True)
    assert len(response.get_json()["created"]) == count
    assert steps[0] <= count + 2


@pytest.mark.slow  # seconds of work: left out of make test-fast
def test_a_dry_run_of_the_maximum_is_answered(api: FlaskClient, schedule_id: str) -> None:
    body = {"from": minutes_ago(2 * MAX_BACKFILL), "count": MAX_BACKFILL, "dry_run": True}
    response = api.post(f"/api/schedules/{schedule_id}/backfill", json=body)
    assert response.status_code == 200, response.get_data(as_text=True)
    assert len(response.get_json()["created"]) == MAX_BACKFILL
