"""Triggers over REST: a webhook call signed with the project's secret starts its workflow
once per delivery id, with the declared part of the body as params; a call that is not
signed, or signed with another key, or stale, is a 401 and changes nothing. Triggers are
listed beside schedules and paused like them."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any

import pytest
from cryptography.fernet import Fernet
from flask.testing import FlaskClient

from tests.api.conftest import Pusher, assert_problem

KEY = "hook-signing-key"
HOOKED = """\
trigger:
  webhook:
    name: deploy
    secret: hooks.deploy
    params: /release
+announce:
  echo>: ${release.version}
"""
REPORT = "trigger:\n  after: load\n+report:\n  echo>: hi\n"
LOAD = "+load:\n  echo>: hi\n"


@pytest.fixture(autouse=True)
def secret_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TICKWORK_SECRET_KEY", Fernet.generate_key().decode())


@pytest.fixture
def hooked(api: FlaskClient, push: Pusher) -> None:
    files = {"deploy.dig": HOOKED, "load.dig": LOAD, "report.dig": REPORT}
    assert push("shop", files).status_code == 201
    answer = api.put("/api/projects/shop/secrets/hooks.deploy", json={"value": KEY})
    assert answer.status_code in (200, 201), answer.get_data(as_text=True)


def call(
    client: FlaskClient,
    body: dict[str, Any],
    *,
    delivery: str = "d-1",
    key: str = KEY,
    timestamp: int | None = None,
) -> Any:
    raw = json.dumps(body).encode()
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    signature = hmac.new(key.encode(), stamp.encode() + b"." + raw, hashlib.sha256).hexdigest()
    return client.post(
        "/api/hooks/shop/deploy",
        data=raw,
        headers={
            "Content-Type": "application/json",
            "X-Tickwork-Timestamp": stamp,
            "X-Tickwork-Signature": f"sha256={signature}",
            "X-Tickwork-Delivery": delivery,
        },
    )


def attempts_of(api: FlaskClient, workflow: str) -> list[dict[str, Any]]:
    answer = api.get("/api/attempts", query_string={"project": "shop", "workflow": workflow})
    items: list[dict[str, Any]] = answer.get_json()["items"]
    return items


@pytest.mark.usefixtures("hooked")
def test_a_signed_call_starts_the_workflow_once_per_delivery_with_its_params(
    api: FlaskClient, anonymous_api: FlaskClient
) -> None:
    first = call(anonymous_api, {"release": {"version": "1.2"}, "other": 1})
    assert first.status_code == 201, first.get_data(as_text=True)
    again = call(anonymous_api, {"release": {"version": "1.2"}, "other": 1})
    assert again.status_code == 200
    assert again.get_json()["attempt_id"] == first.get_json()["attempt_id"]
    (attempt,) = attempts_of(api, "deploy")
    params = api.get(f"/api/attempts/{attempt['id']}").get_json()["params"]
    assert params["version"] == "1.2" and "other" not in params
    assert params["hook"]["delivery"] == "d-1"
    assert call(anonymous_api, {"release": {"version": "1.3"}}, delivery="d-2").status_code == 201
    assert len(attempts_of(api, "deploy")) == 2


@pytest.mark.usefixtures("hooked")
@pytest.mark.parametrize(
    ("how", "words"),
    [
        ({"key": "another-key"}, "not signed"),
        ({"timestamp": 1_000_000}, "stale"),
        ({"delivery": ""}, "X-Tickwork-Delivery"),
    ],
)
def test_a_call_not_signed_with_the_secret_is_401_and_changes_nothing(
    api: FlaskClient, anonymous_api: FlaskClient, how: dict[str, Any], words: str
) -> None:
    answer = call(anonymous_api, {"release": {"version": "9"}}, **how)
    assert words in assert_problem(answer, 401)["detail"]
    assert attempts_of(api, "deploy") == []


@pytest.mark.usefixtures("hooked")
def test_params_that_are_not_an_object_are_422_naming_the_pointer(
    anonymous_api: FlaskClient,
) -> None:
    answer = call(anonymous_api, {"release": "1.2"})
    problem = assert_problem(answer, 422)
    assert problem["errors"][0]["pointer"] == "/release"


@pytest.mark.usefixtures("hooked")
def test_triggers_are_listed_and_a_paused_webhook_is_409(
    api: FlaskClient, anonymous_api: FlaskClient
) -> None:
    items = api.get("/api/triggers", query_string={"project": "shop"}).get_json()["items"]
    kinds = sorted((t["workflow"], t["kind"], t["upstream"], t["hook"]) for t in items)
    assert kinds == [("deploy", "webhook", None, "deploy"), ("report", "after", "shop/load", None)]
    hook = next(t for t in items if t["kind"] == "webhook")
    assert api.post(f"/api/triggers/{hook['id']}/pause").get_json()["paused"] is True
    assert_problem(call(anonymous_api, {"release": {"version": "1"}}), 409)
    assert api.post(f"/api/triggers/{hook['id']}/resume").get_json()["paused"] is False
    assert call(anonymous_api, {"release": {"version": "1"}}).status_code == 201


@pytest.mark.usefixtures("hooked")
def test_an_unknown_webhook_is_404(anonymous_api: FlaskClient) -> None:
    answer = anonymous_api.post(
        "/api/hooks/shop/nope",
        data=b"{}",
        headers={
            "Content-Type": "application/json",
            "X-Tickwork-Timestamp": str(int(time.time())),
            "X-Tickwork-Delivery": "x",
        },
    )
    assert_problem(answer, 404)


def test_two_workflows_naming_one_webhook_are_refused_at_push(push: Pusher) -> None:
    other = HOOKED.replace("announce", "again")
    answer = push("shop", {"deploy.dig": HOOKED, "redeploy.dig": other})
    problem = assert_problem(answer, 422)
    assert "declared by deploy.dig too" in json.dumps(problem)


def test_a_limited_token_may_not_push_a_trigger_waiting_for_a_project_it_does_not_cover(
    api: FlaskClient, api_app: Any, make_archive: Any
) -> None:
    made = api.post(
        "/api/tokens", json={"name": "shop-admin", "role": "admin", "projects": ["shop"]}
    )
    limited = api_app.test_client()
    limited.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {made.get_json()['secret']}"
    archive = make_archive({"report.dig": "trigger:\n  after: finance/close\n+r:\n  echo>: x\n"})
    answer = limited.put(
        "/api/projects/shop", data=archive, headers={"Content-Type": "application/gzip"}
    )
    assert "does not cover" in assert_problem(answer, 403)["detail"]
