"""Named tokens of the store over REST: an admin creates one (its secret answered once and
stored as a digest only), each role may do what its table says and no more, a revoked or
expired token is refused at once by every replica, revoking ends its web UI sessions, and
``/api/whoami`` names the token asking."""

from __future__ import annotations

import json
import logging
import time
from datetime import timedelta
from typing import Any

import pytest
from apiflask import APIFlask
from flask.testing import FlaskClient
from sqlalchemy import Engine, select, update

from tests.api.conftest import ADMIN_TOKEN, Pusher, assert_problem
from tickwork.services.api import auth
from tickwork.services.api.app import create_app
from tickwork.services.api.config import ApiConfig
from tickwork.shared.clock import utc_now
from tickwork.shared.errors import InvalidConfig
from tickwork.shared.store.api_tokens import SECRET_PREFIX, secret_digest
from tickwork.shared.store.tables import api_tokens


def client_with(app: APIFlask, secret: str) -> FlaskClient:
    client = app.test_client()
    client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {secret}"
    return client


def create(api: FlaskClient, name: str, role: str, **body: Any) -> dict[str, Any]:
    answer = api.post("/api/tokens", json={"name": name, "role": role, **body})
    assert answer.status_code == 201, answer.get_data(as_text=True)
    created: dict[str, Any] = answer.get_json()
    return created


@pytest.fixture
def project(push: Pusher) -> str:
    assert push("demo", {"hello.dig": "+hello:\n  echo>: hi\n"}).status_code == 201
    return "demo"


def test_a_created_token_is_answered_once_and_stored_as_its_digest_only(
    api: FlaskClient, engine: Engine
) -> None:
    created = create(api, "ci-data", "read", expires_in="90d")
    secret = created["secret"]
    assert secret.startswith(SECRET_PREFIX) and len(secret) > 40
    assert created["created_by"] == "env:admin" and created["live"] is True
    listed = api.get("/api/tokens").get_json()["items"]
    assert [item["name"] for item in listed] == ["ci-data"]
    assert "secret" not in listed[0] and secret not in api.get("/api/tokens").get_data(True)
    with engine.connect() as conn:
        row = conn.execute(select(api_tokens)).one()
    assert row.digest == secret_digest(secret) and secret not in repr(tuple(row))
    assert timedelta(days=89) < row.expires_at - row.created_at <= timedelta(days=90)


def test_whoami_names_the_token_asking(api_app: APIFlask, api: FlaskClient) -> None:
    assert api.get("/api/whoami").get_json() == {
        "name": "env:admin",
        "role": "admin",
        "projects": [],
        "source": "environment",
        "expires_at": None,
    }
    secret = create(api, "alice", "operate")["secret"]
    mine = client_with(api_app, secret).get("/api/whoami").get_json()
    assert (mine["name"], mine["role"], mine["source"]) == ("alice", "operate", "store")


def test_a_read_token_sees_but_may_not_act(
    api_app: APIFlask, api: FlaskClient, project: str
) -> None:
    reader = client_with(api_app, create(api, "viewer", "read")["secret"])
    assert reader.get("/api/sessions").status_code == 200
    refused = reader.post("/api/attempts", json={"project": "demo", "workflow": "hello"})
    assert "needs an operate token" in assert_problem(refused, 403)["detail"]


def test_an_operate_token_starts_and_kills_but_may_not_push_or_manage(
    api_app: APIFlask, api: FlaskClient, project: str
) -> None:
    operator = client_with(api_app, create(api, "oncall", "operate")["secret"])
    started = operator.post("/api/attempts", json={"project": "demo", "workflow": "hello"})
    assert started.status_code == 201, started.get_data(as_text=True)
    killed = operator.post(f"/api/attempts/{started.get_json()['id']}/kill")
    assert killed.status_code == 202, killed.get_data(as_text=True)
    for method, path in [
        ("PUT", "/api/projects/demo"),
        ("DELETE", "/api/projects/demo"),
        ("GET", "/api/projects/demo/secrets"),
        ("GET", "/api/tokens"),
        ("POST", "/api/tokens"),
        ("DELETE", "/api/tokens/oncall"),
    ]:
        answer = operator.open(path, method=method, json={})
        assert "needs an admin token" in assert_problem(answer, 403)["detail"], (method, path)


def test_a_revoked_token_is_refused_within_a_second_by_another_replica(
    api_app: APIFlask, api: FlaskClient, api_config: ApiConfig, engine: Engine
) -> None:
    secret = create(api, "leaver", "read")["secret"]
    other_replica = create_app(api_config, engine)
    other_replica.testing = True
    leaver = client_with(other_replica, secret)
    assert leaver.get("/api/sessions").status_code == 200
    trusted = dict(auth._verified)  # what the other replica's process holds now
    revoked = api.delete("/api/tokens/leaver")
    assert revoked.status_code == 200 and revoked.get_json()["revoked_at"] is not None
    auth._verified.update(trusted)  # replicas are processes: revoking here clears only here
    deadline = time.monotonic() + auth.VERIFIED_SECONDS + 1.0
    while leaver.get("/api/sessions").status_code == 200:
        assert time.monotonic() < deadline, "still accepted after VERIFIED_SECONDS"
        time.sleep(0.05)
    assert_problem(leaver.get("/api/sessions"), 401)
    assert api.get("/api/tokens").get_json()["items"][0]["live"] is False


def test_revoking_a_token_ends_its_web_ui_sessions(api_app: APIFlask, api: FlaskClient) -> None:
    secret = create(api, "browser", "operate")["secret"]
    person = api_app.test_client()
    signed_in = person.post("/ui/login", data={"token": secret})
    assert signed_in.status_code == 303 and signed_in.headers["Location"] == "/ui/"
    page = person.get("/ui/sessions")
    assert page.status_code == 200 and "browser" in page.get_data(as_text=True)
    assert api.delete("/api/tokens/browser").status_code == 200
    after = person.get("/ui/sessions")
    assert after.status_code == 303 and after.headers["Location"].startswith("/ui/login")


def test_an_expired_token_is_refused(api_app: APIFlask, api: FlaskClient, engine: Engine) -> None:
    secret = create(api, "short", "read", expires_in="1h")["secret"]
    with engine.begin() as conn:
        conn.execute(update(api_tokens).values(expires_at=utc_now() - timedelta(seconds=1)))
    assert_problem(client_with(api_app, secret).get("/api/sessions"), 401)
    assert api.get("/api/tokens").get_json()["items"][0]["live"] is False


def test_names_are_checked_and_never_reused(api: FlaskClient) -> None:
    create(api, "once", "read")
    assert api.delete("/api/tokens/once").status_code == 200
    again = api.post("/api/tokens", json={"name": "once", "role": "read"})
    assert "not reused" in assert_problem(again, 409)["detail"]
    bad = api.post("/api/tokens", json={"name": "env:admin", "role": "admin"})
    assert "env:admin" in assert_problem(bad, 422)["detail"]
    no_duration = api.post("/api/tokens", json={"name": "x", "role": "read", "expires_in": "soon"})
    assert "/expires_in" in json.dumps(assert_problem(no_duration, 422))
    assert_problem(api.delete("/api/tokens/nobody"), 404)


def test_a_token_secret_never_reaches_the_log(
    api_app: APIFlask, api: FlaskClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        secret = create(api, "quiet", "read")["secret"]
        client_with(api_app, secret).get("/api/sessions")
        client_with(api_app, secret + "x").get("/api/sessions")
        api.delete("/api/tokens/quiet")
    assert secret not in caplog.text and ADMIN_TOKEN not in caplog.text


def test_environment_tokens_are_named_as_given_or_by_role() -> None:
    config = ApiConfig.from_environment(
        {"TICKWORK_API_TOKENS": "admin:aaaaaaaaaa,ops=operate:bbbbbbbbbb,admin:cccccccccc"}
    )
    assert [(t.name, t.role) for t in config.tokens] == [
        ("env:admin", "admin"),
        ("env:ops", "operate"),
        ("env:admin-2", "admin"),
    ]
    with pytest.raises(InvalidConfig, match="two tokens are named 'ops'"):
        ApiConfig.from_environment(
            {"TICKWORK_API_TOKENS": "ops=read:aaaaaaaaaa,ops=admin:bbbbbbbbbb"}
        )


def test_a_token_secret_never_reaches_metrics_or_error_answers(
    api_app: APIFlask, api: FlaskClient
) -> None:
    secret = create(api, "counted", "read")["secret"]
    reader = client_with(api_app, secret)
    refused = reader.post("/api/attempts", json={"project": "x", "workflow": "y"})
    wrong = client_with(api_app, secret[:-1] + "x").get("/api/sessions")
    metrics = api_app.test_client().get("/metrics").get_data(as_text=True)
    for text in (refused.get_data(as_text=True), wrong.get_data(as_text=True), metrics):
        assert secret not in text and secret[:-1] not in text and ADMIN_TOKEN not in text
