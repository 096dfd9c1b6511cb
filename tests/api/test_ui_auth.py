"""Signing in to the web UI: the session cookie, the page guard, CSRF, roles, security
headers and HTML error pages (services/api/ui/auth.py)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from http.cookies import SimpleCookie

import pytest
from apiflask import APIFlask
from flask import Blueprint, render_template_string
from flask.testing import FlaskClient
from sqlalchemy import Engine
from werkzeug.test import TestResponse

from tests.api.conftest import ADMIN_TOKEN, READ_TOKEN
from tickwork.services.api.app import create_app
from tickwork.services.api.config import ApiConfig, ApiToken
from tickwork.services.api.ui.auth import (
    AUTH_OFF_NOTICE,
    FAILED_SIGN_INS_BURST,
    SESSION_COOKIE,
    local_target,
    session_key,
)
from tickwork.shared.store.engine import create_store_engine

CSRF_INPUT = re.compile(r'name="csrf_token" value="([^"]+)"')
DONE = "the dummy action ran"
DUMMY_FORM = """{% import "ui/_macros.html" as ui %}
<form method="post" action="/ui/dummy">{{ ui.csrf() }}<button>Act</button></form>"""


@pytest.fixture
def sqlite_engine(migrated_sqlite_url: str) -> Iterator[Engine]:
    """A migrated SQLite store (the pages here read nothing from it)."""
    engine = create_store_engine(migrated_sqlite_url)
    yield engine
    engine.dispose()


def make_app(config: ApiConfig, engine: Engine) -> APIFlask:
    """The app of ``config`` with one dummy state-changing page, ``POST /ui/dummy``."""
    app = create_app(config, engine)
    app.testing = True
    dummy = Blueprint("ui_dummy", __name__, url_prefix="/ui")
    dummy.add_url_rule("/dummy", "form", lambda: render_template_string(DUMMY_FORM))
    dummy.add_url_rule("/dummy", "act", lambda: DONE, methods=["POST"])
    app.register_blueprint(dummy)
    return app


@pytest.fixture
def tokens_config(migrated_sqlite_url: str) -> ApiConfig:
    """Settings with an admin and a read token and no general rate limit."""
    return ApiConfig(
        database_url=migrated_sqlite_url,
        tokens=(ApiToken("admin", ADMIN_TOKEN), ApiToken("read", READ_TOKEN)),
        rate_limit_per_second=0,
    )


@pytest.fixture
def ui_app(tokens_config: ApiConfig, sqlite_engine: Engine) -> APIFlask:
    return make_app(tokens_config, sqlite_engine)


@pytest.fixture
def client(ui_app: APIFlask) -> FlaskClient:
    return ui_app.test_client()


def sign_in(client: FlaskClient, token: str, next_page: str | None = None) -> TestResponse:
    """Post ``token`` to the login form, as the login page does."""
    form = {"token": token} if next_page is None else {"token": token, "next": next_page}
    return client.post("/ui/login", data=form)


def page_csrf(client: FlaskClient) -> str:
    """The CSRF token a page puts in its form (``ui.csrf()``)."""
    html = client.get("/ui/dummy").get_data(as_text=True)
    found = CSRF_INPUT.search(html)
    assert found, html
    return found.group(1)


def session_cookie(response: TestResponse) -> SimpleCookie:
    """The session cookie the response sets (empty when it sets none)."""
    cookie: SimpleCookie = SimpleCookie()
    for header in response.headers.getlist("Set-Cookie"):
        if header.startswith(SESSION_COOKIE + "="):
            cookie.load(header)
    return cookie


def test_signing_in_sets_a_signed_httponly_strict_session_cookie_without_the_token(
    client: FlaskClient,
) -> None:
    response = sign_in(client, ADMIN_TOKEN)
    assert response.status_code == 303
    assert response.headers["Location"] == "/ui/"
    header = next(h for h in response.headers.getlist("Set-Cookie") if SESSION_COOKIE in h)
    attributes = {part.strip().split("=")[0].lower() for part in header.split(";")}
    assert {"httponly", "path", "expires"} <= attributes
    assert "SameSite=Strict" in header
    assert session_cookie(response)[SESSION_COOKIE]["path"] == "/ui"  # pages only
    assert "secure" not in attributes  # plain http
    assert ADMIN_TOKEN not in header


def test_the_session_cookie_is_secure_over_https(client: FlaskClient) -> None:
    response = client.post("/ui/login", data={"token": ADMIN_TOKEN}, base_url="https://localhost")
    morsel = session_cookie(response)[SESSION_COOKIE]
    assert morsel["secure"] is True


def test_a_page_without_sign_in_leads_to_the_login_page_and_back(client: FlaskClient) -> None:
    response = client.get("/ui/sessions?project=demo")
    assert response.status_code == 303
    assert response.headers["Location"] == "/ui/login?next=%2Fui%2Fsessions%3Fproject%3Ddemo"
    login = client.get(response.headers["Location"])
    assert login.status_code == 200
    html = login.get_data(as_text=True)
    assert '<label for="token">Token</label>' in html
    assert 'name="next" value="/ui/sessions?project=demo"' in html
    assert sign_in(client, READ_TOKEN, "/ui/sessions?project=demo").headers["Location"] == (
        "/ui/sessions?project=demo"
    )


def test_a_wrong_token_stays_on_the_login_page_with_an_error_and_no_cookie(
    client: FlaskClient,
) -> None:
    response = sign_in(client, "not-a-token-at-all")
    assert response.status_code == 401
    assert "That token is not valid." in response.get_data(as_text=True)
    assert not session_cookie(response)
    assert client.get("/ui/").status_code == 303


def test_failed_sign_ins_are_limited_per_client(client: FlaskClient) -> None:
    for _ in range(FAILED_SIGN_INS_BURST):
        assert sign_in(client, "guessing-tokens").status_code == 401
    refused = sign_in(client, ADMIN_TOKEN)
    assert refused.status_code == 429
    assert refused.mimetype == "text/html"
    assert int(refused.headers["Retry-After"]) >= 1


def test_a_successful_sign_in_does_not_count_against_the_limit(client: FlaskClient) -> None:
    for _ in range(FAILED_SIGN_INS_BURST + 2):
        assert sign_in(client, ADMIN_TOKEN).status_code == 303


def test_a_sign_in_posted_from_another_site_is_refused(client: FlaskClient) -> None:
    response = client.post(
        "/ui/login", data={"token": ADMIN_TOKEN}, headers={"Origin": "https://evil.example"}
    )
    assert response.status_code == 403
    assert not session_cookie(response)
    cross_site = client.post(
        "/ui/login", data={"token": ADMIN_TOKEN}, headers={"Sec-Fetch-Site": "cross-site"}
    )
    assert cross_site.status_code == 403


def test_a_post_without_or_with_a_wrong_csrf_token_is_refused(client: FlaskClient) -> None:
    sign_in(client, ADMIN_TOKEN)
    missing = client.post("/ui/dummy")
    assert missing.status_code == 400
    assert missing.mimetype == "text/html"
    assert "CSRF" in missing.get_data(as_text=True)
    wrong = client.post("/ui/dummy", data={"csrf_token": "forged"})
    assert wrong.status_code == 400
    assert client.post("/ui/dummy", headers={"X-CSRF-Token": "forged"}).status_code == 400


def test_an_admin_session_may_act_with_the_csrf_token(client: FlaskClient) -> None:
    sign_in(client, ADMIN_TOKEN)
    token = page_csrf(client)
    by_form = client.post("/ui/dummy", data={"csrf_token": token})
    assert by_form.status_code == 200
    assert by_form.get_data(as_text=True) == DONE
    by_header = client.post("/ui/dummy", headers={"X-CSRF-Token": token})
    assert by_header.get_data(as_text=True) == DONE


def test_a_read_session_may_not_act(client: FlaskClient) -> None:
    sign_in(client, READ_TOKEN)
    html = client.get("/ui/nowhere").get_data(as_text=True)
    assert "<strong>read</strong>" in html
    response = client.post("/ui/dummy", data={"csrf_token": page_csrf(client)})
    assert response.status_code == 403
    assert response.mimetype == "text/html"
    assert "admin token" in response.get_data(as_text=True)


def test_a_bearer_token_is_its_holder_without_cookie_or_csrf(ui_app: APIFlask) -> None:
    admin = ui_app.test_client()
    admin.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {ADMIN_TOKEN}"
    assert admin.post("/ui/dummy").get_data(as_text=True) == DONE
    reader = ui_app.test_client()
    reader.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {READ_TOKEN}"
    assert reader.post("/ui/dummy").status_code == 403
    stranger = ui_app.test_client()
    stranger.environ_base["HTTP_AUTHORIZATION"] = "Bearer not-a-token-at-all"
    assert stranger.get("/ui/").status_code == 401


def test_signing_out_ends_the_session_and_needs_the_csrf_token(client: FlaskClient) -> None:
    sign_in(client, READ_TOKEN)
    assert client.post("/ui/logout").status_code == 400
    response = client.post("/ui/logout", data={"csrf_token": page_csrf(client)})
    assert response.status_code == 303
    assert response.headers["Location"] == "/ui/login"
    assert session_cookie(response)[SESSION_COOKIE]["expires"]  # the cookie is dropped
    assert client.get("/ui/").status_code == 303


def test_a_token_removed_from_the_configuration_ends_its_sessions(
    tokens_config: ApiConfig, sqlite_engine: Engine
) -> None:
    keyed = dataclasses.replace(tokens_config, secret_key="a secret key of the deployment")
    before = make_app(keyed, sqlite_engine).test_client()
    sign_in(before, READ_TOKEN)
    cookie = before.get_cookie(SESSION_COOKIE, path="/ui")
    assert cookie is not None
    without_read = dataclasses.replace(keyed, tokens=(ApiToken("admin", ADMIN_TOKEN),))
    after = make_app(without_read, sqlite_engine).test_client()
    after.set_cookie(SESSION_COOKIE, cookie.value, path="/ui")
    response = after.get("/ui/")
    assert response.status_code == 303
    assert response.headers["Location"] == "/ui/login"
    login = after.get("/ui/login").get_data(as_text=True)
    assert "no longer accepted" in login
    # The session ended in the store: a replica still configured with the token agrees.
    still = make_app(keyed, sqlite_engine).test_client()
    still.set_cookie(SESSION_COOKIE, cookie.value, path="/ui")
    assert still.get("/ui/nowhere").status_code == 303


@pytest.mark.parametrize(
    "target",
    [
        "https://evil.example/ui/",
        "//evil.example/ui/",
        "/\\evil.example",
        "\\\\evil.example",
        "/ui/../../evil",
        "javascript:alert(1)",
        "/api/projects",
        "/ui/login",
        "/ui/\r\nSet-Cookie: x=1",
    ],
)
def test_next_never_leads_off_the_ui(client: FlaskClient, target: str) -> None:
    assert local_target(target) == "/ui/"
    assert sign_in(client, ADMIN_TOKEN, target).headers["Location"] == "/ui/"


def test_next_keeps_a_page_of_the_ui_with_its_query() -> None:
    assert local_target("/ui/attempts/12?state=error") == "/ui/attempts/12?state=error"


def test_the_session_key_is_derived_never_raw(tokens_config: ApiConfig) -> None:
    keyed = dataclasses.replace(tokens_config, secret_key="a secret key of the deployment")
    assert session_key(keyed) != b"a secret key of the deployment"
    assert session_key(keyed) == session_key(dataclasses.replace(keyed, tokens=()))
    from_tokens = session_key(tokens_config)
    assert ADMIN_TOKEN.encode() not in from_tokens
    other_admin = (ApiToken("admin", "another-admin-token"), ApiToken("read", READ_TOKEN))
    assert session_key(dataclasses.replace(tokens_config, tokens=other_admin)) != from_tokens
    open_config = dataclasses.replace(tokens_config, tokens=(), auth_enabled=False)
    assert len(session_key(open_config)) == 32
    assert session_key(open_config) == session_key(dataclasses.replace(open_config))


def test_with_auth_off_pages_are_open_everyone_may_act_and_the_page_says_so(
    tokens_config: ApiConfig, sqlite_engine: Engine
) -> None:
    open_config = dataclasses.replace(tokens_config, tokens=(), auth_enabled=False)
    client = make_app(open_config, sqlite_engine).test_client()
    page = client.get("/ui/nowhere")
    assert page.status_code == 404
    assert AUTH_OFF_NOTICE in page.get_data(as_text=True)
    assert client.get("/ui/login?next=/ui/projects").headers["Location"] == "/ui/projects"
    assert client.post("/ui/dummy").status_code == 400  # forms still carry the CSRF token
    acted = client.post("/ui/dummy", data={"csrf_token": page_csrf(client)})
    assert acted.get_data(as_text=True) == DONE


def test_every_ui_answer_has_a_content_security_policy_without_inline_scripts(
    client: FlaskClient,
) -> None:
    for path in ("/ui/login", "/ui/", "/ui/static/ui.css", "/ui/nowhere"):
        headers = client.get(path).headers
        policy = headers["Content-Security-Policy"]
        assert "script-src 'self'" in policy
        assert "frame-ancestors 'none'" in policy
        assert "unsafe-inline" not in policy
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert headers["Referrer-Policy"] == "same-origin"


def test_a_missing_ui_page_is_an_html_error_page(client: FlaskClient) -> None:
    sign_in(client, READ_TOKEN)
    response = client.get("/ui/no-such-page")
    assert response.status_code == 404
    assert response.mimetype == "text/html"
    html = response.get_data(as_text=True)
    assert "404" in html
    assert "There is no page at this address." in html
    assert 'href="/ui/"' in html


def test_the_rest_api_still_answers_problem_documents(client: FlaskClient) -> None:
    response = client.get("/api/no-such-thing")
    assert response.mimetype == "application/problem+json"
    assert "Content-Security-Policy" not in response.headers
