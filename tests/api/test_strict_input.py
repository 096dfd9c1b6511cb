"""Request input is taken as typed: JSON types are strict, empty strings and unknown query
parameters are refused, numbers the store cannot hold are named by their pointer; each
refusal is a 422 that changes nothing."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.api.conftest import HELLO_WORKFLOW, Pusher, assert_problem


@pytest.fixture
def schedule_id(push: Pusher, api: FlaskClient) -> str:
    """The schedule of the default project's daily workflow."""
    assert push("demo").status_code == 201
    return str(api.get("/api/schedules").get_json()["items"][0]["id"])


def missed(api: FlaskClient, schedule_id: str) -> list[Any]:
    found: list[Any] = api.get(f"/api/schedules/{schedule_id}").get_json()["missed"]
    return found


class TestSkip:
    @pytest.mark.parametrize(
        ("body", "pointer"),
        [
            ({"to": ""}, "/to"),
            ({"count": True}, "/count"),
            ({"count": "2"}, "/count"),
            ({"count": 2.0}, "/count"),
            ({"to": None, "count": None}, ""),
            ({}, ""),
            ({"to": "2026-12-24", "count": 1}, ""),
        ],
    )
    def test_a_skip_needs_exactly_one_of_a_time_or_a_whole_count(
        self, api: FlaskClient, schedule_id: str, body: dict[str, Any], pointer: str
    ) -> None:
        response = api.post(f"/api/schedules/{schedule_id}/skip", json=body)
        problem = assert_problem(response, 422)
        assert problem["errors"][0]["pointer"] == pointer
        assert missed(api, schedule_id) == []

    def test_a_skip_past_its_maximum_is_refused_rather_than_cut_short(
        self, api: FlaskClient, schedule_id: str
    ) -> None:
        # 10,000 daily session times reach about 2054
        response = api.post(f"/api/schedules/{schedule_id}/skip", json={"to": "2090-01-01"})
        problem = assert_problem(response, 422)
        assert problem["errors"][0]["pointer"] == "/to"
        assert "10000" in problem["detail"]
        assert missed(api, schedule_id) == []

    def test_a_whole_count_still_skips(self, api: FlaskClient, schedule_id: str) -> None:
        response = api.post(f"/api/schedules/{schedule_id}/skip", json={"count": 2})
        assert response.status_code == 200, response.get_data(as_text=True)
        assert response.get_json()["skipped"] == 2


class TestStrictBodies:
    @pytest.mark.parametrize(
        ("path", "body", "pointer"),
        [
            ("resume", {"replay": "true"}, "/replay"),
            ("resume", {"replay": 1}, "/replay"),
            ("backfill", {"from": "2026-11-01", "count": "1"}, "/count"),
            ("backfill", {"from": "2026-11-01", "count": 1, "dry_run": "yes"}, "/dry_run"),
            ("backfill", {"from": "", "count": 1}, "/from"),
            ("backfill", {"from": "2026-11-01", "to": ""}, "/to"),
        ],
    )
    def test_a_schedule_control_takes_json_types_as_they_are(
        self,
        api: FlaskClient,
        schedule_id: str,
        path: str,
        body: dict[str, Any],
        pointer: str,
    ) -> None:
        problem = assert_problem(api.post(f"/api/schedules/{schedule_id}/{path}", json=body), 422)
        assert problem["errors"][0]["pointer"] == pointer

    @pytest.mark.parametrize(
        ("body", "pointer"),
        [
            ({"project": "", "workflow": "hello"}, "/project"),
            ({"project": "demo", "workflow": "hello", "session_time": ""}, "/session_time"),
            ({"project": "demo", "workflow": "hello", "idempotency_key": ""}, "/idempotency_key"),
            ({"project": "demo", "workflow": "hello", "params": {"": 1}}, "/params"),
            ({"project": "demo", "workflow": 7}, "/workflow"),
        ],
    )
    def test_a_start_refuses_empty_strings_and_wrong_types(
        self, api: FlaskClient, push: Pusher, body: dict[str, Any], pointer: str
    ) -> None:
        push("demo", {"hello.dig": HELLO_WORKFLOW})
        problem = assert_problem(api.post("/api/attempts", json=body), 422)
        assert problem["errors"][0]["pointer"] == pointer
        assert api.get("/api/attempts").get_json()["items"] == []


class TestNumbersTheStoreCannotHold:
    @pytest.mark.parametrize(
        "number", ["NaN", "Infinity", "-Infinity", "1e400", "9223372036854775808", "1" * 5000]
    )
    def test_a_number_out_of_range_is_refused_with_its_pointer(
        self, api: FlaskClient, push: Pusher, number: str
    ) -> None:
        push("demo", {"hello.dig": HELLO_WORKFLOW})
        raw = '{"project": "demo", "workflow": "hello", "params": {"x": [1, NUMBER]}}'
        raw = raw.replace("NUMBER", number)
        response = api.post("/api/attempts", data=raw, content_type="application/json")
        problem = assert_problem(response, 422)
        assert problem["errors"][0]["pointer"] == "/params/x/1"
        assert api.get("/api/attempts").get_json()["items"] == []

    def test_numbers_within_range_are_kept(self, api: FlaskClient, push: Pusher) -> None:
        push("demo", {"hello.dig": HELLO_WORKFLOW})
        raw = (
            '{"project": "demo", "workflow": "hello", '
            '"params": {"big": 9223372036854775807, "small": -1e-400, "real": 1.5e300}}'
        )
        response = api.post("/api/attempts", data=raw, content_type="application/json")
        assert response.status_code == 201, response.get_data(as_text=True)
        assert response.get_json()["params"] == {
            "big": 9223372036854775807,
            "small": -0.0,
            "real": 1.5e300,
        }


class TestQueryParameters:
    @pytest.mark.parametrize(
        ("method", "path"),
        [
            ("post", "/api/schedules/{id}/pause"),
            ("get", "/api/schedules/{id}"),
            ("get", "/api/projects/demo"),
            ("delete", "/api/projects/demo"),
            ("get", "/api/version"),
            ("get", "/healthz"),
        ],
    )
    def test_a_route_without_parameters_refuses_any_and_does_nothing(
        self, api: FlaskClient, schedule_id: str, method: str, path: str
    ) -> None:
        url = path.replace("{id}", schedule_id) + "?bogus=1"
        problem = assert_problem(getattr(api, method)(url), 422)
        assert problem["errors"][0]["parameter"] == "bogus"
        assert api.get(f"/api/schedules/{schedule_id}").get_json()["paused"] is False
        assert api.get("/api/projects/demo").status_code == 200

    def test_a_parameter_given_twice_is_refused(self, api: FlaskClient) -> None:
        problem = assert_problem(api.get("/api/projects?limit=1&limit=5000"), 422)
        assert problem["errors"][0]["parameter"] == "limit"

    def test_an_empty_filter_is_refused(self, api: FlaskClient) -> None:
        problem = assert_problem(api.get("/api/attempts?project="), 422)
        assert problem["errors"][0]["parameter"] == "project"

    def test_a_route_without_a_body_refuses_members(
        self, api: FlaskClient, schedule_id: str
    ) -> None:
        response = api.post(f"/api/schedules/{schedule_id}/pause", json={"bogus": 1})
        assert_problem(response, 422)
        assert api.get(f"/api/schedules/{schedule_id}").get_json()["paused"] is False
        assert api.post(f"/api/schedules/{schedule_id}/pause", json={}).status_code == 200

    def test_the_api_document_takes_what_a_browser_sends(self, api: FlaskClient) -> None:
        assert api.get("/api/openapi.json?v=1").status_code == 200

    def test_the_api_document_says_every_operation_may_refuse_its_input(
        self, api: FlaskClient
    ) -> None:
        paths = api.get("/api/openapi.json").get_json()["paths"]
        undocumented = [
            f"{method.upper()} {path}"
            for path, operations in paths.items()
            for method, operation in operations.items()
            if "422" not in operation["responses"]
        ]
        assert undocumented == []
