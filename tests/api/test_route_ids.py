"""Every id in a path, UI and REST, goes through one bounded converter: ids out of the
store's range, signs and text are a 4xx on every route and method, never a 500.

The walk is built from the application's own URL map, so a route added later is walked
too; each backend in turn, signed in as an admin with a bearer token (which needs no
CSRF token).
"""

from __future__ import annotations

import re

import pytest
from apiflask import APIFlask
from flask.testing import FlaskClient
from sqlalchemy import Engine

from tests.api._seed import THREE_STEPS, add_project, add_sessions, store_run_log
from tickwork.services.api.app import IdConverter
from tickwork.services.api.paging import MAX_ID
from tickwork.shared.domain.states import AttemptState

PLACEHOLDER = re.compile(r"<(?:([^:<>]+):)?([^<>]+)>")
BAD_IDS = ("0", "-1", str(2**63), str(10**20), "abc", "007")
# Values for the placeholders that are not ids: names a store may hold.
OTHER_VALUES = {"filename": "ui.css"}
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def placeholders(rule: str) -> list[tuple[str, str]]:
    """(converter, name) of each placeholder of ``rule``, the converter "default" when
    none is named."""
    return [(converter or "default", name) for converter, name in PLACEHOLDER.findall(rule)]


def fill(rule: str, ids: dict[str, str]) -> str:
    """``rule`` with each id placeholder given its value in ``ids`` and others a name."""

    def value(match: re.Match[str]) -> str:
        name = match.group(2)
        return ids.get(name) or OTHER_VALUES.get(name, "demo")

    return PLACEHOLDER.sub(value, rule)


def requests_of(app: APIFlask, id_value: str) -> list[tuple[str, str]]:
    """(method, path) for every route with an id and each of its methods, one of its ids
    set to ``id_value`` (the others to 1), in turn."""
    walked: list[tuple[str, str]] = []
    for rule in app.url_map.iter_rules():
        id_names = [name for converter, name in placeholders(rule.rule) if converter == "id"]
        for bad in id_names:
            path = fill(rule.rule, {name: id_value if name == bad else "1" for name in id_names})
            walked.extend((method, path) for method in sorted(rule.methods or ()))
    return walked


def test_the_id_converter_takes_1_to_the_largest_stored_id_and_nothing_else() -> None:
    pattern = re.compile(IdConverter.regex)
    for good in ("1", "42", str(MAX_ID)):
        assert pattern.fullmatch(good)
    for bad in ("0", "-1", "+1", "01", "abc", "1.0", str(10**20)):
        assert not pattern.fullmatch(bad), bad
    assert MAX_ID == 2**63 - 1


def test_every_id_in_a_path_uses_the_bounded_converter(api_app: APIFlask) -> None:
    assert api_app.url_map.converters["id"] is IdConverter
    for rule in api_app.url_map.iter_rules():
        for converter, name in placeholders(rule.rule):
            assert converter != "int", f"{rule.rule}: use <id:{name}>"
            if name.endswith("_id") or name == "id":
                assert converter == "id", f"{rule.rule}: {name} needs <id:{name}>"


def test_the_walk_covers_the_ui_and_the_rest_api(api_app: APIFlask) -> None:
    paths = {path for _, path in requests_of(api_app, "1")}
    assert any(path.startswith("/ui/schedules/") for path in paths)
    assert any(path.startswith("/ui/attempts/") for path in paths)
    assert any(path.startswith("/api/") for path in paths)


def answers(api: FlaskClient, walked: list[tuple[str, str]]) -> dict[str, int]:
    """The status of each (method, path), a JSON object sent to the REST API's writes."""
    found = {}
    for method, path in walked:
        sends_json = method in BODY_METHODS and path.startswith("/api/")
        response = api.open(path, method=method, json={} if sends_json else None)
        found[f"{method} {path}"] = response.status_code
        response.close()
    return found


@pytest.mark.parametrize("id_value", BAD_IDS)
def test_every_route_and_method_answers_a_4xx_to_an_id_out_of_range(
    api: FlaskClient, api_app: APIFlask, id_value: str
) -> None:
    found = answers(api, requests_of(api_app, id_value))
    wrong = {request: status for request, status in found.items() if not 400 <= status < 500}
    assert not wrong, wrong
    assert len(found) > 20


def test_the_largest_id_reaches_the_store_and_is_never_a_server_error(
    api: FlaskClient, api_app: APIFlask
) -> None:
    # Nothing has the id: reads are a 404; a form sent for it may lead back to a page
    # that says so (a redirect), but no route fails.
    found = answers(api, requests_of(api_app, str(MAX_ID)))
    assert not {request: status for request, status in found.items() if status >= 500}
    reads = {r: s for r, s in found.items() if r.startswith(("GET ", "HEAD "))}
    assert not {request: status for request, status in reads.items() if status != 404}


@pytest.mark.parametrize("number", [str(2**63 - 1), str(2**63), str(10**20)])
def test_numbers_past_64_bits_in_a_query_string_are_never_a_server_error(
    api: FlaskClient, engine: Engine, number: str
) -> None:
    # Given an ended attempt with one task's log
    with engine.begin() as conn:
        project_id = add_project(conn, "etl", {"steps": THREE_STEPS})
    add_sessions(engine, project_id, "steps", 1, state=AttemptState.SUCCESS)
    store_run_log(engine, 1, "+steps+first", b"hello\n" * 100)
    # When each number the store cannot hold (or its largest) is given where ids,
    # offsets, lengths and page sizes go
    paths = (
        f"/api/logs/1/files/1?offset={number}",
        f"/api/logs/1/files/1?offset=1&length={number}",
        f"/api/logs/1/follow?offset={number}&max_seconds=1",
        f"/ui/attempts/1/logs/1?offset={number}",
        f"/ui/attempts/1/follow?offset={number}",
        f"/api/sessions?limit={number}",
        f"/api/attempts?limit={number}",
        f"/api/attempts/1/tasks?limit={number}",
        f"/ui/search?q={number}",
    )
    found = {}
    for path in paths:
        response = api.get(path)
        found[path] = response.status_code
        response.close()
    # Then none of them fails on the server
    assert not {path: status for path, status in found.items() if status >= 500}, found
    ranged = api.get("/api/logs/1/files/1", headers={"Range": f"bytes={number}-"})
    assert ranged.status_code == 416
