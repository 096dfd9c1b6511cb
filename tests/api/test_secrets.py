"""Secrets over REST: admin tokens only, names listed and values never answered, PUT is an
upsert, DELETE, and clear problems for a bad name, an unknown project or a missing key."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet
from flask.testing import FlaskClient
from sqlalchemy import Engine, select

from tests.api.conftest import Pusher, assert_problem
from tickwork.shared.store.tables import secrets

KEY = Fernet.generate_key().decode()


@pytest.fixture(autouse=True)
def secret_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TICKWORK_SECRET_KEY", KEY)


@pytest.fixture
def project(push: Pusher) -> str:
    assert push("demo", revision="r1").status_code == 201
    return "demo"


def test_put_then_list_shows_the_name_and_never_the_value(
    api: FlaskClient, project: str, engine: Engine
) -> None:
    created = api.put("/api/projects/demo/secrets/db.password", json={"value": "hunter2"})
    assert created.status_code == 200, created.get_data(as_text=True)
    assert created.get_json() == {"project": "demo", "name": "db.password", "created": True}
    again = api.put("/api/projects/demo/secrets/db.password", json={"value": "hunter3"})
    assert again.get_json()["created"] is False
    listed = api.get("/api/projects/demo/secrets")
    assert [item["name"] for item in listed.get_json()["items"]] == ["db.password"]
    assert "hunter" not in listed.get_data(as_text=True)
    with engine.connect() as conn:
        stored = conn.execute(select(secrets.c.value_encrypted)).scalar_one()
    assert Fernet(KEY.encode()).decrypt(stored.encode()) == b"hunter3"


def test_delete_removes_it_and_again_is_not_found(api: FlaskClient, project: str) -> None:
    api.put("/api/projects/demo/secrets/token", json={"value": "v"})
    assert api.delete("/api/projects/demo/secrets/token").status_code == 204
    assert api.get("/api/projects/demo/secrets").get_json()["items"] == []
    assert_problem(api.delete("/api/projects/demo/secrets/token"), 404)


def test_a_read_token_may_not_even_list(read_api: FlaskClient, project: str) -> None:
    assert_problem(read_api.get("/api/projects/demo/secrets"), 403)
    assert_problem(read_api.put("/api/projects/demo/secrets/t", json={"value": "v"}), 403)


def test_no_token_is_unauthorized(anonymous_api: FlaskClient, project: str) -> None:
    assert_problem(anonymous_api.get("/api/projects/demo/secrets"), 401)


def test_an_unknown_project_is_not_found(api: FlaskClient) -> None:
    assert_problem(api.put("/api/projects/nope/secrets/t", json={"value": "v"}), 404)
    assert_problem(api.get("/api/projects/nope/secrets"), 404)


def test_a_bad_name_or_body_is_refused_and_stores_nothing(api: FlaskClient, project: str) -> None:
    assert_problem(api.put("/api/projects/demo/secrets/a%20b", json={"value": "v"}), 422)
    assert_problem(api.put("/api/projects/demo/secrets/t", json={"value": 1}), 422)
    assert_problem(api.put("/api/projects/demo/secrets/t", json={"v": "x"}), 422)
    assert api.get("/api/projects/demo/secrets").get_json()["items"] == []


def test_without_a_key_the_api_says_which_variable_is_missing(
    api: FlaskClient, project: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TICKWORK_SECRET_KEY")
    body = assert_problem(api.put("/api/projects/demo/secrets/t", json={"value": "v"}), 503)
    assert "TICKWORK_SECRET_KEY" in body["detail"]


def test_create_project_sets_a_secret_of_a_project_not_pushed_yet(api: FlaskClient) -> None:
    body = {"value": "v", "create_project": True}

    created = api.put("/api/projects/local/secrets/token", json=body)

    assert created.status_code == 200, created.get_data(as_text=True)
    assert created.get_json() == {"project": "local", "name": "token", "created": True}
    listed = api.get("/api/projects/local/secrets").get_json()["items"]
    assert [item["name"] for item in listed] == ["token"]
    again = api.put("/api/projects/local/secrets/token", json=body)
    assert again.get_json()["created"] is False


def test_create_project_refuses_a_name_no_project_may_have(api: FlaskClient) -> None:
    body = {"value": "v", "create_project": True}
    assert_problem(api.put("/api/projects/-bad/secrets/token", json=body), 422)
    assert_problem(api.put("/api/projects/x/secrets/t", json={**body, "create_project": 1}), 422)
    assert_problem(api.get("/api/projects/-bad/secrets"), 404)
