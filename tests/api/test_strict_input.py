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

    @pytest.mark.slow  # seconds of work: left out of make test-fast
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


class TestDocumentedNamesOnly:
    @pytest.mark.parametrize(
        ("path", "body", "pointer"),
        [
            ("backfill", {"first": "2026-11-01", "count": 1}, "/first"),
            ("skip", {"count": 1, "first": "2026-11-01"}, "/first"),
        ],
    )
    def test_a_member_is_known_by_its_documented_name_only(
        self, api: FlaskClient, schedule_id: str, path: str, body: dict[str, Any], pointer: str
    ) -> None:
        response = api.post(f"/api/schedules/{schedule_id}/{path}", json=body)
        problem = assert_problem(response, 422)
        assert pointer in [error["pointer"] for error in problem["errors"]]
        assert missed(api, schedule_id) == []
        assert api.get("/api/sessions").get_json()["items"] == []

    def test_a_retry_names_its_task_by_from_not_by_the_attribute_behind_it(
        self, api: FlaskClient, push: Pusher
    ) -> None:
        push("demo", {"hello.dig": HELLO_WORKFLOW})
        start = {"project": "demo", "workflow": "hello"}
        attempt = api.post("/api/attempts", json=start).get_json()["id"]
        body = {"mode": "from", "from_task": "+hello"}
        problem = assert_problem(api.post(f"/api/attempts/{attempt}/retry", json=body), 422)
        assert "/from_task" in [error["pointer"] for error in problem["errors"]]
        assert len(api.get("/api/attempts").get_json()["items"]) == 1


class TestDuplicateMembers:
    def test_a_member_given_twice_is_refused_with_its_pointer_and_nothing_is_skipped(
        self, api: FlaskClient, schedule_id: str
    ) -> None:
        response = api.post(
            f"/api/schedules/{schedule_id}/skip",
            data='{"count": 1, "count": 2}',
            content_type="application/json",
        )
        problem = assert_problem(response, 422)
        assert problem["errors"][0]["pointer"] == "/count"
        assert "more than once" in problem["detail"]
        assert missed(api, schedule_id) == []

    def test_a_nested_member_given_twice_is_named_by_its_full_pointer(
        self, api: FlaskClient, push: Pusher
    ) -> None:
        push("demo", {"hello.dig": HELLO_WORKFLOW})
        raw = '{"project": "demo", "workflow": "hello", "params": {"a": {"b": 1, "b": 1}}}'
        response = api.post("/api/attempts", data=raw, content_type="application/json")
        assert assert_problem(response, 422)["errors"][0]["pointer"] == "/params/a/b"
        assert api.get("/api/attempts").get_json()["items"] == []


class TestTimesAreTakenExactly:
    @pytest.mark.parametrize("time", ["2026-11-01T00:00Z\n", " 2026-11-01", "2026-11-01\t"])
    def test_whitespace_around_a_time_is_refused(
        self, api: FlaskClient, schedule_id: str, time: str
    ) -> None:
        body = {"from": time, "count": 1, "dry_run": True}
        response = api.post(f"/api/schedules/{schedule_id}/backfill", json=body)
        problem = assert_problem(response, 422)
        assert problem["errors"][0]["pointer"] == "/from"
        assert "whitespace" in problem["detail"]

    def test_whitespace_around_a_time_parameter_is_refused(self, api: FlaskClient) -> None:
        response = api.get("/api/sessions", query_string={"from": "2026-11-01 "})
        assert assert_problem(response, 422)["errors"][0]["parameter"] == "from"


class TestParamsAreTheUsers:
    def test_any_member_name_is_kept_inside_params_the_empty_one_too(
        self, api: FlaskClient, push: Pusher
    ) -> None:
        push("demo", {"hello.dig": HELLO_WORKFLOW})
        params = {"": 1, " ": {"": ""}}
        body = {"project": "demo", "workflow": "hello", "params": params}
        response = api.post("/api/attempts", json=body)
        assert response.status_code == 201, response.get_data(as_text=True)
        assert response.get_json()["params"] == params

    @pytest.mark.parametrize("escaped_name", [r"a\u0000", r"\ud800"])
    def test_a_member_name_the_store_cannot_hold_is_still_refused(
        self, api: FlaskClient, push: Pusher, escaped_name: str
    ) -> None:
        push("demo", {"hello.dig": HELLO_WORKFLOW})
        raw = '{"project": "demo", "workflow": "hello", "params": {"NAME": 1}}'
        raw = raw.replace("NAME", escaped_name)
        response = api.post("/api/attempts", data=raw, content_type="application/json")
        assert assert_problem(response, 422)["errors"][0]["pointer"] == "/params"
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
