"""The audit log: every change asked of the API leaves one row naming who, what, the
target and project, where from and how it ended (refused and failed ones too); secrets
and tokens never reach it; ``GET /api/audit`` filters and pages it for admins only; and
retention removes its rows only after their own, longer setting."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from apiflask import APIFlask
from flask.testing import FlaskClient
from sqlalchemy import Engine, func, select, update

from tests.api._seed import set_state
from tests.api.conftest import ADMIN_TOKEN, READ_TOKEN, Pusher, assert_problem
from tickwork.services.api.audit import ACTIONS
from tickwork.shared.clock import utc_now
from tickwork.shared.domain.states import AttemptState
from tickwork.shared.store.audit import SYSTEM_ACTOR
from tickwork.shared.store.retention import RetentionPolicy, prune_history
from tickwork.shared.store.retention_batches import BatchLimits
from tickwork.shared.store.tables import audit_events

START = "2026-01-01T00:00:00+09:00"
SECRET_VALUE = "hunter2-do-not-log"


@pytest.fixture(autouse=True)
def secret_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TICKWORK_SECRET_KEY", "k" * 32)


def rows(engine: Engine) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(select(audit_events).order_by(audit_events.c.id)))


def last(engine: Engine) -> Any:
    return rows(engine)[-1]


def test_every_route_that_changes_something_has_an_audit_action(api_app: APIFlask) -> None:
    changing = {
        rule.endpoint
        for rule in api_app.url_map.iter_rules()
        if set(rule.methods or ()) - {"GET", "HEAD", "OPTIONS"}
    }
    assert changing == set(ACTIONS)


def test_each_change_leaves_one_row_with_its_actor_target_and_project(
    api: FlaskClient, push: Pusher, engine: Engine
) -> None:
    done = 0

    def did(action: str, answer: Any, target: str, project: str | None) -> None:
        nonlocal done
        assert answer.status_code < 400, answer.get_data(as_text=True)
        done += 1
        found = rows(engine)
        assert len(found) == done, [r.action for r in found]
        row = found[-1]
        assert (row.actor, row.action, row.target, row.project, row.outcome) == (
            "env:admin",
            action,
            target,
            project,
            "ok",
        )
        assert row.client_address == "127.0.0.1"

    did("project.push", push("demo", schedule_from=START), "project demo", "demo")
    schedule = api.get("/api/schedules").get_json()["items"][0]["id"]
    did(
        "schedule.pause",
        api.post(f"/api/schedules/{schedule}/pause"),
        f"schedule {schedule}",
        "demo",
    )
    resume = api.post(f"/api/schedules/{schedule}/resume", json={"replay": False})
    did("schedule.resume", resume, f"schedule {schedule}", "demo")
    skip = api.post(f"/api/schedules/{schedule}/skip", json={"count": 1})
    did("schedule.skip", skip, f"schedule {schedule}", "demo")
    backfill = api.post(
        f"/api/schedules/{schedule}/backfill",
        json={"from": "2026-01-01", "to": "2026-01-02", "dry_run": True},
    )
    did("schedule.backfill", backfill, f"schedule {schedule}", "demo")
    start = api.post("/api/attempts", json={"project": "demo", "workflow": "daily"})
    did("attempt.start", start, "workflow daily", "demo")
    attempt = start.get_json()["id"]
    did("attempt.kill", api.post(f"/api/attempts/{attempt}/kill"), f"attempt {attempt}", "demo")
    with engine.begin() as conn:
        set_state(conn, int(attempt), AttemptState.KILLED)
    retry = api.post(f"/api/attempts/{attempt}/retry", json={"mode": "all"})
    did("attempt.retry", retry, f"attempt {attempt}", "demo")
    put = api.put("/api/projects/demo/secrets/db.password", json={"value": SECRET_VALUE})
    did("secret.set", put, "secret db.password", "demo")
    did(
        "secret.delete",
        api.delete("/api/projects/demo/secrets/db.password"),
        "secret db.password",
        "demo",
    )
    created = api.post("/api/tokens", json={"name": "ci", "role": "read"})
    did("token.create", created, "token ci", None)
    did("token.revoke", api.delete("/api/tokens/ci"), "token ci", None)
    did("project.delete", api.delete("/api/projects/demo"), "project demo", "demo")

    text = json.dumps([tuple(map(str, row)) for row in rows(engine)])
    for secret in (SECRET_VALUE, created.get_json()["secret"], ADMIN_TOKEN):
        assert secret not in text
    secret_row = next(r for r in rows(engine) if r.action == "secret.set")
    assert secret_row.params == {"body": {"value": "***"}}


def test_a_refused_change_leaves_a_refused_row(
    read_api: FlaskClient, anonymous_api: FlaskClient, push: Pusher, engine: Engine
) -> None:
    assert push("demo").status_code == 201
    refused = read_api.post("/api/attempts", json={"project": "demo", "workflow": "daily"})
    assert_problem(refused, 403)
    row = last(engine)
    assert (row.actor, row.action, row.status, row.outcome) == (
        "env:read",
        "attempt.start",
        403,
        "refused",
    )
    assert_problem(anonymous_api.delete("/api/projects/demo"), 401)
    row = last(engine)
    assert (row.actor, row.action, row.target, row.outcome) == (
        "unknown",
        "project.delete",
        "project demo",
        "refused",
    )
    assert READ_TOKEN not in json.dumps([tuple(map(str, r)) for r in rows(engine)])


def test_a_failed_change_leaves_a_failed_row_and_nothing_else(
    api: FlaskClient, engine: Engine
) -> None:
    assert_problem(api.post("/api/attempts", json={"project": "nope", "workflow": "x"}), 404)
    row = last(engine)
    assert (row.action, row.status, row.outcome, len(rows(engine))) == (
        "attempt.start",
        404,
        "failed",
        1,
    )


def test_the_log_is_listed_newest_first_filtered_and_paged_for_admins_only(
    api: FlaskClient, read_api: FlaskClient, push: Pusher
) -> None:
    for name in ("a", "b", "c"):
        assert push(name).status_code == 201
    page = api.get("/api/audit", query_string={"limit": 2}).get_json()
    assert [item["target"] for item in page["items"]] == ["project c", "project b"]
    rest = api.get("/api/audit", query_string={"limit": 2, "cursor": page["next_cursor"]})
    assert [item["target"] for item in rest.get_json()["items"]] == ["project a"]
    only_b = api.get("/api/audit", query_string={"project": "b"}).get_json()["items"]
    assert [(i["action"], i["actor"]) for i in only_b] == [("project.push", "env:admin")]
    none = api.get("/api/audit", query_string={"actor": "env:read"}).get_json()["items"]
    assert none == []
    assert_problem(read_api.get("/api/audit"), 403)
    bad = assert_problem(api.get("/api/audit", query_string={"since": "yesterday"}), 422)
    assert "since" in json.dumps(bad)
    assert api.delete("/api/audit").status_code in (404, 405)


def test_retention_removes_audit_rows_only_after_their_own_setting(
    api: FlaskClient, push: Pusher, engine: Engine
) -> None:
    assert push("old").status_code == 201
    assert push("recent").status_code == 201
    now = utc_now()
    with engine.begin() as conn:
        conn.execute(
            update(audit_events)
            .where(audit_events.c.target == "project old")
            .values(at=now - timedelta(days=401))
        )
        conn.execute(
            update(audit_events)
            .where(audit_events.c.target == "project recent")
            .values(at=now - timedelta(days=399))
        )
    policy = RetentionPolicy(history=timedelta(days=90), logs=None, keep_revisions=None)
    result = prune_history(engine, policy, now, limits=BatchLimits(pause_seconds=0))
    assert result.removed["audit_events"] == 1
    targets = [r.target for r in rows(engine)]
    assert "project old" not in targets and "project recent" in targets
    prune_row = last(engine)
    assert (prune_row.actor, prune_row.action) == (SYSTEM_ACTOR, "retention.prune")
    assert prune_row.params == {"audit_events": 1}
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(audit_events)).scalar_one() == 2


def test_the_audit_page_lists_events_for_admins_and_refuses_others(
    api_app: APIFlask, push: Pusher
) -> None:
    assert push("demo").status_code == 201
    admin = api_app.test_client()
    assert admin.post("/ui/login", data={"token": ADMIN_TOKEN}).status_code == 303
    page = admin.get("/ui/audit?project=demo")
    html = page.get_data(as_text=True)
    assert page.status_code == 200 and "project.push" in html and "env:admin" in html
    assert 'href="/ui/audit"' in html  # the header links it for admins
    assert "ui.sign_in" in admin.get("/ui/audit").get_data(as_text=True)
    bad = admin.get("/ui/audit?since=yesterday")
    assert bad.status_code == 400 and "since" in bad.get_data(as_text=True)
    reader = api_app.test_client()
    assert reader.post("/ui/login", data={"token": READ_TOKEN}).status_code == 303
    assert 'href="/ui/audit"' not in reader.get("/ui/").get_data(as_text=True)
    assert reader.get("/ui/audit").status_code == 403
