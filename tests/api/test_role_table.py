"""Who may do what, route by route: every route of the API and the web UI is in the table
below (none left out), and a token of each role, sent to each route, is refused (403)
exactly when its role is below the route's. A token limited to other projects is refused
the same, and on a route whose path names a project or a thing of one (the arguments of
:data:`PROJECT_BOUND`) it finds nothing (404; 403 to push), while a token limited to that
project answers as an unlimited one does; on the routes that manage tokens or change
pools (:func:`unlimited_only`) any limited token is refused."""

from __future__ import annotations

from typing import Any

import pytest
from apiflask import APIFlask
from sqlalchemy import Engine
from werkzeug.routing import Rule

from tests.api._seed import add_pushed_run
from tests.api.conftest import Pusher
from tests.support.history_seed import Run

OPEN = "open"
READ, OPERATE, ADMIN = "read", "operate", "admin"
RANK = {READ: 0, OPERATE: 1, ADMIN: 2}

WHO_MAY: dict[str, str] = {
    # Probes, the API's own documents, the UI's shell and sign-in: no token needed.
    "health.healthz": OPEN,
    "health.readyz": OPEN,
    "health.metrics": OPEN,
    "openapi.spec": OPEN,
    "_api_docs": OPEN,
    "_favicon": OPEN,
    "_root": OPEN,
    "static": OPEN,
    "ui.static": OPEN,
    "ui_auth.login": OPEN,
    "ui_auth.login_submit": OPEN,
    "ui_auth.logout": READ,
    # Reads.
    "health.api_version": READ,
    "whoami.whoami": READ,
    "projects.list_projects": READ,
    "projects.get_project": READ,
    "projects.list_revisions": READ,
    "projects.download_archive": READ,
    "projects.list_project_workflows": READ,
    "projects.get_project_workflow": READ,
    "workflows.list_workflows": READ,
    "workflows.get_workflow": READ,
    "schedules.list_schedules": READ,
    "schedules.get_schedule": READ,
    "sessions.list_sessions": READ,
    "sessions.get_session": READ,
    "sessions.session_attempts": READ,
    "attempts.list_attempts": READ,
    "attempts.get_attempt": READ,
    "attempts.failures": READ,
    "attempts.tasks": READ,
    "attempts.task_detail": READ,
    "logs.list_files": READ,
    "logs.get_file": READ,
    "logs.follow": READ,
    "ui_formatting.states_css": READ,
    "ui_overview.overview": READ,
    "ui_overview.overview_live": READ,
    "ui_projects.projects": READ,
    "ui_projects.project": READ,
    "ui_projects.project_live": READ,
    "ui_projects.workflow": READ,
    "ui_projects.workflow_live": READ,
    "ui_projects.archive": READ,
    "ui_runs.sessions_page": READ,
    "ui_runs.sessions_live": READ,
    "ui_runs.attempts_page": READ,
    "ui_runs.attempts_live": READ,
    "ui_attempt.attempt_page": READ,
    "ui_attempt.attempt_live": READ,
    "ui_attempt.task_detail": READ,
    "ui_attempt.task_log": READ,
    "ui_attempt.log_file": READ,
    "ui_attempt.follow_logs": READ,
    "ui_schedules.schedule_list": READ,
    "ui_schedules.schedule_page": READ,
    "ui_schedules.backfill_preview": READ,
    "ui_search.search_page": READ,
    "ui_actions.start_form": READ,
    "ui_actions.retry_form": READ,
    "ui_actions.kill_form": READ,
    "notifications.list_deliveries": READ,
    "notifications.get_delivery": READ,
    "notifications.list_rules": READ,
    "ui_notifications.notifications_page": READ,
    "triggers.list_triggers": READ,
    "triggers.get_trigger": READ,
    "triggers.receive_hook": OPEN,
    "pools.list_pools": READ,
    "pools.get_pool": READ,
    "ui_pools.pools_page": READ,
    # Operating: start, retry, kill; steer schedules.
    "attempts.start": OPERATE,
    "attempts.kill": OPERATE,
    "attempts.retry": OPERATE,
    "schedules.pause_schedule": OPERATE,
    "schedules.resume_schedule": OPERATE,
    "schedules.skip_schedule": OPERATE,
    "schedules.backfill_schedule": OPERATE,
    "ui_actions.start": OPERATE,
    "ui_actions.retry": OPERATE,
    "ui_actions.kill": OPERATE,
    "ui_schedules.pause": OPERATE,
    "ui_schedules.resume": OPERATE,
    "ui_schedules.skip": OPERATE,
    "ui_schedules.backfill": OPERATE,
    "notifications.test_rule": OPERATE,
    "triggers.pause_trigger": OPERATE,
    "triggers.resume_trigger": OPERATE,
    "ui_schedules.pause_trigger": OPERATE,
    "ui_schedules.resume_trigger": OPERATE,
    # Administering: projects, secrets, tokens, the audit log, pools.
    "projects.push_project": ADMIN,
    "projects.remove_project": ADMIN,
    "secrets.list_secrets": ADMIN,
    "secrets.set_secret": ADMIN,
    "secrets.delete_secret": ADMIN,
    "tokens.list_tokens": ADMIN,
    "tokens.create_token": ADMIN,
    "tokens.revoke_token": ADMIN,
    "audit.list_audit": ADMIN,
    "ui_audit.audit_page": ADMIN,
    "pools.set_pool": ADMIN,
    "pools.delete_pool": ADMIN,
    "ui_pools.set_pool": ADMIN,
    "ui_pools.delete_pool": ADMIN,
}


PROJECT_BOUND = frozenset(
    {"name", "attempt_id", "session_id", "schedule_id", "workflow_id", "delivery_id", "trigger_id"}
)
"""Path arguments naming a project or a thing of one (task and log ids come with their
attempt's)."""
UNLIMITED_ONLY = frozenset(
    {"pools.set_pool", "pools.delete_pool", "ui_pools.set_pool", "ui_pools.delete_pool"}
)
"""Routes besides the tokens' that a token limited to projects may never use (403, its
role whatever): they change what every project shares."""


def unlimited_only(endpoint: str) -> bool:
    """Whether only a token without project globs may use ``endpoint``."""
    return endpoint.startswith("tokens.") or endpoint in UNLIMITED_ONLY


SAMPLES = {"filename": "ui.css", "workflow": "daily"}


def sample_path(rule: Rule) -> str:
    """The rule's path with each argument filled: ids 1, a static file's name, the
    workflow ``daily``, else ``demo``."""
    values: dict[str, Any] = {}
    for name in rule.arguments:
        values[name] = 1 if name.endswith("_id") else SAMPLES.get(name, "demo")
    built = rule.build(values, append_unknown=False)
    assert built is not None, rule.rule
    return built[1]


@pytest.fixture
def role_tokens(api_app: APIFlask) -> dict[str, str]:
    """A store token of each role, made by the environment's admin."""
    admin = api_app.test_client()
    admin.environ_base["HTTP_AUTHORIZATION"] = "Bearer admin-token-for-tests"
    made = {}
    for role in (READ, OPERATE, ADMIN):
        answer = admin.post("/api/tokens", json={"name": f"as-{role}", "role": role})
        assert answer.status_code == 201, answer.get_data(as_text=True)
        made[role] = answer.get_json()["secret"]
    return made


@pytest.fixture
def demo(push: Pusher, engine: Engine) -> Run:
    """Project ``demo`` with its daily schedule and a run: the first of each kind, so each
    sample path's id 1 is one of demo's."""
    assert push("demo").status_code == 201
    return add_pushed_run(engine, "demo", "daily")


def _limited_tokens(app: APIFlask, label: str, glob: str) -> dict[str, str]:
    admin = app.test_client()
    admin.environ_base["HTTP_AUTHORIZATION"] = "Bearer admin-token-for-tests"
    made = {}
    for role in (READ, OPERATE, ADMIN):
        body = {"name": f"{label}-{role}", "role": role, "projects": [glob]}
        answer = admin.post("/api/tokens", json=body)
        assert answer.status_code == 201, answer.get_data(as_text=True)
        made[role] = answer.get_json()["secret"]
    return made


def test_a_token_limited_to_other_projects_is_refused_or_finds_nothing_where_the_table_says(
    api_app: APIFlask, demo: Run, role_tokens: dict[str, str]
) -> None:
    outside = _limited_tokens(api_app, "outside", "other-*")
    inside = _limited_tokens(api_app, "inside", "dem?")
    wrong: list[str] = []
    for rule in api_app.url_map.iter_rules():
        needed = WHO_MAY[rule.endpoint]
        if needed == OPEN:
            continue
        path = sample_path(rule)
        bound = bool(PROJECT_BOUND & set(rule.arguments)) and not unlimited_only(rule.endpoint)
        for method in sorted(set(rule.methods or ()) - {"HEAD", "OPTIONS"}):
            for role in (READ, OPERATE, ADMIN):
                status = _send(api_app, method, path, outside[role]).status_code
                if RANK[role] < RANK[needed] or unlimited_only(rule.endpoint):
                    expected = 403
                elif bound:
                    expected = 403 if rule.endpoint == "projects.push_project" else 404
                else:  # nothing of a project in the path: as an unlimited token
                    expected = _send(api_app, method, path, role_tokens[role]).status_code
                if status != expected:
                    wrong.append(f"{method} {path} as {role} outside: {status}, not {expected}")
                if method == "GET" and not unlimited_only(rule.endpoint):
                    mine = _send(api_app, method, path, inside[role]).status_code
                    everyone = _send(api_app, method, path, role_tokens[role]).status_code
                    if mine != everyone:
                        wrong.append(f"GET {path} as {role} inside: {mine}, not {everyone}")
    assert not wrong, "\n".join(wrong)


def test_every_route_is_in_the_table(api_app: APIFlask) -> None:
    assert {rule.endpoint for rule in api_app.url_map.iter_rules()} == set(WHO_MAY)


def test_each_role_is_refused_exactly_where_the_table_says(
    api_app: APIFlask, role_tokens: dict[str, str]
) -> None:
    wrong: list[str] = []
    for rule in api_app.url_map.iter_rules():
        needed = WHO_MAY[rule.endpoint]
        path = sample_path(rule)
        for method in sorted(set(rule.methods or ()) - {"HEAD", "OPTIONS"}):
            for role, secret in role_tokens.items():
                answer = _send(api_app, method, path, secret)
                refused = answer.status_code == 403
                should = needed != OPEN and RANK[role] < RANK[needed]
                if refused != should:
                    wrong.append(f"{method} {path} as {role}: {answer.status_code}")
    assert not wrong, "\n".join(wrong)


def _send(app: APIFlask, method: str, path: str, secret: str) -> Any:
    client = app.test_client()
    client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {secret}"
    if path.endswith("/follow"):  # a stream: ask for what is already there only
        path += "?offset=0"
    body = (
        {"json": {}} if method in ("POST", "PUT", "DELETE") and not path.startswith("/ui") else {}
    )
    answer = client.open(path, method=method, **body)
    answer.close()
    return answer
