"""Tokens limited to projects: a token created with project globs sees only those
projects in every list, page and search; another project's ids answer 404 in the words a
missing id gets; its role still decides what it may do, on its own projects only; and
only an admin token without globs manages tokens."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from apiflask import APIFlask
from flask.testing import FlaskClient
from sqlalchemy import Engine, select

from tests.api._seed import add_pushed_run
from tests.api.conftest import DAILY_WORKFLOW, Pusher, assert_problem
from tests.api.test_tokens import client_with, create
from tests.support.history_seed import Run
from tickwork.shared.clock import utc_now
from tickwork.shared.domain.states import AttemptState
from tickwork.shared.store.api_tokens import covers
from tickwork.shared.store.tables import audit_events, task_logs

HELLO = "+hello:\n  echo>: hi\n"
MISSING_ID = 987654


@pytest.fixture
def runs(push: Pusher, engine: Engine) -> dict[str, Run]:
    """Projects ``alpha`` and ``beta``, each with a daily schedule, a one-off workflow and
    a run that failed two hours ago (so the overview shows it)."""
    made = {}
    for name in ("alpha", "beta"):
        files = {"daily.dig": DAILY_WORKFLOW, "hello.dig": HELLO}
        assert push(name, files).status_code == 201
        made[name] = add_pushed_run(
            engine, name, "daily", state=AttemptState.ERROR, at=utc_now() - timedelta(hours=2)
        )
    return made


def limited(api_app: APIFlask, api: FlaskClient, name: str, role: str, *globs: str) -> Any:
    """A client holding a new token of ``role`` limited to ``globs``."""
    return client_with(api_app, create(api, name, role, projects=list(globs))["secret"])


def log_id(engine: Engine, run: Run) -> int:
    with engine.connect() as conn:
        query = select(task_logs.c.id).where(task_logs.c.attempt_id == run.attempt_id)
        return int(conn.execute(query.limit(1)).scalar_one())


def test_globs_cover_names_as_the_shell_matches_them() -> None:
    assert covers((), "anything")
    assert covers(("data-*",), "data-daily") and not covers(("data-*",), "datadaily")
    assert covers(("etl", "ml-?"), "ml-1") and not covers(("etl", "ml-?"), "ml-10")
    assert covers(("[ab]*",), "beta") and not covers(("[!ab]*",), "beta")
    assert not covers(("Data-*",), "data-daily")  # names are matched case-sensitively


def test_a_limited_token_sees_only_its_projects_in_every_list(
    api_app: APIFlask, api: FlaskClient, runs: dict[str, Run]
) -> None:
    reader = limited(api_app, api, "alpha-reader", "read", "alph*")
    for path in (
        "/api/projects",
        "/api/workflows",
        "/api/schedules",
        "/api/sessions",
        "/api/attempts",
        "/api/sessions?project=beta",
        "/api/attempts?project_contains=bet",
        "/api/schedules?q=beta",
    ):
        everything = api.get(path).get_data(as_text=True)
        answer = reader.get(path)
        assert answer.status_code == 200, (path, answer.get_data(as_text=True))
        text = answer.get_data(as_text=True)
        assert "beta" not in text, path
        assert ("alpha" in text) == ("alpha" in everything), path
    assert [p["name"] for p in reader.get("/api/projects").get_json()["items"]] == ["alpha"]
    sessions = reader.get("/api/sessions").get_json()["items"]
    assert [s["id"] for s in sessions] == [str(runs["alpha"].session_id)]


def test_a_limited_token_sees_only_its_projects_on_every_page(
    api_app: APIFlask, api: FlaskClient, runs: dict[str, Run]
) -> None:
    reader = limited(api_app, api, "alpha-reader", "read", "alpha")
    for path in (
        "/ui/",
        "/ui/overview/live",
        "/ui/projects",
        "/ui/sessions",
        "/ui/sessions/live",
        "/ui/attempts",
        "/ui/attempts/live",
        "/ui/schedules",
        "/ui/search?q=a",
        "/ui/search?q=a&format=json",
    ):
        assert "beta" in api.get(path).get_data(as_text=True), path  # there to be hidden
        answer = reader.get(path)
        assert answer.status_code == 200, (path, answer.status_code)
        assert "beta" not in answer.get_data(as_text=True), path
    assert "alpha" in reader.get("/ui/").get_data(as_text=True)
    by_id = f"/ui/search?q={runs['beta'].attempt_id}&format=json"
    assert api.get(by_id).get_json()["attempt_id"] == str(runs["beta"].attempt_id)
    found = reader.get(by_id).get_json()
    assert (found["attempt_id"], found["session_id"]) == (None, None)


def test_another_project_s_ids_answer_404_in_the_words_a_missing_one_gets(
    api_app: APIFlask, api: FlaskClient, runs: dict[str, Run], engine: Engine
) -> None:
    reader = limited(api_app, api, "alpha-reader", "read", "alpha")
    beta, alpha = runs["beta"], runs["alpha"]
    schedule_ids = {
        name: api.get(f"/api/schedules?project={name}").get_json()["items"][0]["id"]
        for name in ("alpha", "beta")
    }
    workflow_ids = {
        name: api.get(f"/api/workflows?project={name}").get_json()["items"][0]["id"]
        for name in ("alpha", "beta")
    }
    paths = [
        "/api/projects/{project}",
        "/api/projects/{project}/revisions",
        "/api/projects/{project}/archive",
        "/api/projects/{project}/workflows",
        "/api/projects/{project}/workflows/daily",
        "/api/sessions/{session}",
        "/api/sessions/{session}/attempts",
        "/api/attempts/{attempt}",
        "/api/attempts/{attempt}/failures",
        "/api/attempts/{attempt}/tasks",
        "/api/attempts/{attempt}/tasks/{task}",
        "/api/logs/{attempt}/files",
        "/api/logs/{attempt}/files/{log}",
        "/api/logs/{attempt}/follow?offset=0",
        "/api/schedules/{schedule}",
        "/api/workflows/{workflow}",
    ]

    def ids(run: Run, project: str) -> dict[str, Any]:
        return {
            "project": project,
            "session": run.session_id,
            "attempt": run.attempt_id,
            "task": run.task_ids[1],
            "log": log_id(engine, run),
            "schedule": schedule_ids[project],
            "workflow": workflow_ids[project],
        }

    # A distinct missing number for each id, to put the hidden one in its place below.
    missing = {key: MISSING_ID + n for n, key in enumerate(ids(beta, "beta"))}
    missing["project"] = "nosuch"
    for template in paths:
        own = reader.get(template.format(**ids(alpha, "alpha")))
        assert own.status_code == 200, (template, own.get_data(as_text=True))
        own.close()
        hidden = assert_problem(reader.get(template.format(**ids(beta, "beta"))), 404)
        absent = assert_problem(reader.get(template.format(**missing)), 404)
        # The same words, the id or name aside: nothing tells the two apart.
        expected = absent["detail"]
        for key, value in ids(beta, "beta").items():
            expected = expected.replace(str(missing[key]), str(value))
        assert hidden["detail"] == expected, template
    for page in (
        "/ui/attempts/{attempt}",
        "/ui/attempts/{attempt}/tasks/{task}",
        "/ui/attempts/{attempt}/follow?offset=0",
        "/ui/attempts/{attempt}/logs/{log}",
        "/ui/schedules/{schedule}",
        "/ui/projects/{project}",
        "/ui/projects/{project}/archive",
        "/ui/projects/{project}/workflows/daily",
    ):
        assert reader.get(page.format(**ids(alpha, "alpha"))).status_code == 200, page
        hidden_page = reader.get(page.format(**ids(beta, "beta")))
        absent_page = reader.get(page.format(**missing))
        assert hidden_page.status_code == absent_page.status_code == 404, page
        expected = absent_page.get_data(as_text=True)
        for key, value in ids(beta, "beta").items():
            expected = expected.replace(str(missing[key]), str(value))
        assert hidden_page.get_data(as_text=True) == expected, page


def test_an_operate_token_acts_on_its_projects_and_on_nothing_of_another(
    api_app: APIFlask, api: FlaskClient, runs: dict[str, Run], engine: Engine
) -> None:
    operator = limited(api_app, api, "alpha-ci", "operate", "alpha")
    started = operator.post("/api/attempts", json={"project": "alpha", "workflow": "hello"})
    assert started.status_code == 201, started.get_data(as_text=True)
    refused = operator.post("/api/attempts", json={"project": "beta", "workflow": "hello"})
    assert assert_problem(refused, 404)["detail"] == "no project 'beta'"
    beta = runs["beta"]
    schedule = api.get("/api/schedules?project=beta").get_json()["items"][0]["id"]
    for path in (
        f"/api/attempts/{beta.attempt_id}/kill",
        f"/api/attempts/{beta.attempt_id}/retry",
        f"/api/schedules/{schedule}/pause",
        f"/api/schedules/{schedule}/resume",
        f"/api/schedules/{schedule}/skip",
        f"/api/schedules/{schedule}/backfill",
    ):
        assert_problem(operator.post(path, json={}), 404)
    assert api.get(f"/api/schedules/{schedule}").get_json()["paused_at"] is None
    assert [a["project"] for a in api.get("/api/attempts").get_json()["items"]].count("beta") == 1
    with engine.connect() as conn:
        kill = conn.execute(
            select(audit_events).where(audit_events.c.target == f"attempt {beta.attempt_id}")
        ).first()
    assert kill is not None
    assert (kill.actor, kill.status, kill.outcome) == ("alpha-ci", 404, "refused")


def test_a_read_token_limited_to_a_project_may_not_act_on_it(
    api_app: APIFlask, api: FlaskClient, runs: dict[str, Run]
) -> None:
    reader = limited(api_app, api, "alpha-reader", "read", "alpha")
    refused = reader.post("/api/attempts", json={"project": "alpha", "workflow": "hello"})
    assert "needs an operate token" in assert_problem(refused, 403)["detail"]
    kill = reader.post(f"/api/attempts/{runs['alpha'].attempt_id}/kill", json={})
    assert_problem(kill, 403)


def test_a_limited_admin_manages_its_projects_but_not_tokens(
    api_app: APIFlask,
    api: FlaskClient,
    runs: dict[str, Run],
    make_archive: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TICKWORK_SECRET_KEY", "k" * 32)  # to keep secrets
    admin = limited(api_app, api, "alpha-admin", "admin", "alpha*")
    archive = make_archive({"hello.dig": HELLO})
    gzip = {"Content-Type": "application/gzip"}
    assert admin.put("/api/projects/alpha-two", data=archive, headers=gzip).status_code == 201
    refused = admin.put("/api/projects/beta", data=archive, headers=gzip)
    assert "may not push project 'beta'" in assert_problem(refused, 403)["detail"]
    refused = admin.put("/api/projects/gamma", data=archive, headers=gzip)  # new or not
    assert "may not push project 'gamma'" in assert_problem(refused, 403)["detail"]
    assert admin.put("/api/projects/alpha/secrets/key", json={"value": "v"}).status_code == 200
    assert_problem(admin.put("/api/projects/beta/secrets/key", json={"value": "v"}), 404)
    assert_problem(admin.delete("/api/projects/beta"), 404)
    for method, path, body in (
        ("GET", "/api/tokens", None),
        ("POST", "/api/tokens", {"name": "mine", "role": "admin"}),
        ("DELETE", "/api/tokens/alpha-admin", None),
    ):
        answer = admin.open(path, method=method, json=body)
        assert "only an admin token without project globs" in assert_problem(answer, 403)["detail"]
    audit = admin.get("/api/audit").get_json()["items"]
    assert audit and {event["project"] for event in audit} <= {"alpha", "alpha-two"}
    assert any(event["project"] is None for event in api.get("/api/audit").get_json()["items"])
    who = admin.get("/api/whoami").get_json()
    assert (who["name"], who["projects"]) == ("alpha-admin", ["alpha*"])


def test_a_token_s_globs_are_checked_and_listed(api: FlaskClient) -> None:
    created = create(api, "data-ci", "operate", projects=["data-*", "etl", "data-*"])
    assert created["projects"] == ["data-*", "etl"]
    listed = {t["name"]: t["projects"] for t in api.get("/api/tokens").get_json()["items"]}
    assert listed == {"data-ci": ["data-*", "etl"]}
    assert create(api, "everything", "read")["projects"] == []
    for globs, pointer in ((["ok", "../etc"], "/projects/1"), ([""], "/projects/0")):
        answer = api.post("/api/tokens", json={"name": "bad", "role": "read", "projects": globs})
        problem = assert_problem(answer, 422)
        assert problem["detail"].startswith(pointer), problem
    assert api.get("/api/tokens").get_json()["items"][0]["name"] == "data-ci"  # nothing made


def test_a_limited_token_signed_in_to_the_ui_sees_only_its_projects(
    api_app: APIFlask, api: FlaskClient, runs: dict[str, Run]
) -> None:
    secret = create(api, "alpha-person", "read", projects=["alpha"])["secret"]
    browser = api_app.test_client()
    signed_in = browser.post("/ui/login", data={"token": secret})
    assert signed_in.status_code == 303
    page = browser.get("/ui/sessions")
    assert page.status_code == 200
    text = page.get_data(as_text=True)
    assert "alpha" in text and "beta" not in text
    assert 'for projects <strong class="token-projects">alpha</strong>' in text
    assert browser.get(f"/ui/attempts/{runs['beta'].attempt_id}").status_code == 404
