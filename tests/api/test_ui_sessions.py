"""The web UI's sessions live in the store (shared/store/ui_sessions.py): signing out ends
every copy of the cookie on every replica, the idle lifetime is the row's, bearer tokens
on pages are limited like sign-ins, and signed-in pages are never cached.

Two applications on one store stand for two API replicas; each backend in turn.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from apiflask import APIFlask
from flask.testing import FlaskClient
from sqlalchemy import Engine, func, select, update

from tests.api.conftest import ADMIN_TOKEN, READ_TOKEN
from tests.api.test_ui_auth import DONE, make_app, page_csrf, sign_in
from tickwork.services.api.config import ApiConfig
from tickwork.services.api.ui.auth import (
    FAILED_SIGN_INS_BURST,
    SESSION_COOKIE,
    SESSION_ID_KEY,
    SESSION_LIFETIME,
)
from tickwork.shared.clock import utc_now
from tickwork.shared.store.tables import ui_sessions
from tickwork.shared.store.ui_sessions import session_id_digest


@pytest.fixture
def replicas(api_config: ApiConfig, engine: Engine) -> tuple[APIFlask, APIFlask]:
    """Two applications on one store, as two API replicas are."""
    return make_app(api_config, engine), make_app(api_config, engine)


@pytest.fixture
def ui_app(replicas: tuple[APIFlask, APIFlask]) -> APIFlask:
    return replicas[0]


@pytest.fixture
def client(ui_app: APIFlask) -> FlaskClient:
    return ui_app.test_client()


def copy_of_cookie(source: FlaskClient, app: APIFlask) -> FlaskClient:
    """A client of ``app`` holding a copy of ``source``'s session cookie (a second browser)."""
    cookie = source.get_cookie(SESSION_COOKIE, path="/ui")
    assert cookie is not None
    copy = app.test_client()
    copy.set_cookie(SESSION_COOKIE, cookie.value, path="/ui")
    return copy


def cookie_contents(client: FlaskClient, app: APIFlask) -> dict[str, object]:
    """What the client's session cookie says (it is signed, not encrypted)."""
    cookie = client.get_cookie(SESSION_COOKIE, path="/ui")
    assert cookie is not None
    serializer = app.session_interface.get_signing_serializer(app)  # type: ignore[attr-defined]
    contents: dict[str, object] = serializer.loads(cookie.value)
    return contents


def session_rows(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(ui_sessions)).scalar_one())


def age_sessions(engine: Engine, by: timedelta) -> None:
    """Make every session's last use ``by`` earlier."""
    with engine.begin() as conn:
        rows = conn.execute(select(ui_sessions.c.id_digest, ui_sessions.c.last_seen_at)).all()
        for id_digest, last_seen_at in rows:
            conn.execute(
                update(ui_sessions)
                .where(ui_sessions.c.id_digest == id_digest)
                .values(last_seen_at=last_seen_at - by)
            )


class TestSigningOut:
    def test_a_copied_cookie_no_longer_opens_a_page_after_sign_out(
        self, replicas: tuple[APIFlask, APIFlask]
    ) -> None:
        first, _ = replicas
        browser = first.test_client()
        sign_in(browser, ADMIN_TOKEN)
        copy = copy_of_cookie(browser, first)
        assert copy.get("/ui/nowhere").status_code == 404  # signed in: past the guard
        browser.post("/ui/logout", data={"csrf_token": page_csrf(browser)})
        response = copy.get("/ui/nowhere")
        assert response.status_code == 303
        assert response.headers["Location"].startswith("/ui/login")

    def test_a_copied_cookie_can_no_longer_act_after_sign_out(
        self, replicas: tuple[APIFlask, APIFlask]
    ) -> None:
        first, _ = replicas
        browser = first.test_client()
        sign_in(browser, ADMIN_TOKEN)
        csrf = page_csrf(browser)
        copy = copy_of_cookie(browser, first)
        assert copy.post("/ui/dummy", data={"csrf_token": csrf}).get_data(as_text=True) == DONE
        browser.post("/ui/logout", data={"csrf_token": csrf})
        refused = copy.post("/ui/dummy", data={"csrf_token": csrf})
        assert refused.status_code == 303
        assert refused.get_data(as_text=True) != DONE

    def test_signing_out_on_one_replica_ends_the_session_on_the_other(
        self, replicas: tuple[APIFlask, APIFlask]
    ) -> None:
        first, second = replicas
        browser = first.test_client()
        sign_in(browser, READ_TOKEN)
        on_second = copy_of_cookie(browser, second)
        assert on_second.get("/ui/nowhere").status_code == 404
        on_second.post("/ui/logout", data={"csrf_token": page_csrf(on_second)})
        assert copy_of_cookie(browser, first).get("/ui/nowhere").status_code == 303
        assert copy_of_cookie(browser, second).get("/ui/nowhere").status_code == 303

    def test_the_cookie_holds_a_session_id_and_the_store_only_its_digest(
        self, replicas: tuple[APIFlask, APIFlask], engine: Engine
    ) -> None:
        first, _ = replicas
        browser = first.test_client()
        sign_in(browser, ADMIN_TOKEN)
        contents = cookie_contents(browser, first)
        assert set(contents) <= {SESSION_ID_KEY, "csrf", "_permanent", "_flashes"}
        session_id = contents[SESSION_ID_KEY]
        assert isinstance(session_id, str)
        with engine.connect() as conn:
            stored = conn.execute(select(ui_sessions.c.id_digest)).scalars().all()
        assert stored == [session_id_digest(session_id)]
        assert ADMIN_TOKEN not in repr(contents)


class TestLifetime:
    def test_a_session_idle_for_its_lifetime_ends_whatever_the_cookie_says(
        self, replicas: tuple[APIFlask, APIFlask], engine: Engine
    ) -> None:
        first, _ = replicas
        browser = first.test_client()
        sign_in(browser, ADMIN_TOKEN)
        age_sessions(engine, SESSION_LIFETIME - timedelta(minutes=2))
        assert browser.get("/ui/nowhere").status_code == 404  # used again: kept alive
        age_sessions(engine, SESSION_LIFETIME)
        assert browser.get("/ui/nowhere").status_code == 303

    def test_last_use_is_written_at_most_once_a_minute(
        self, replicas: tuple[APIFlask, APIFlask], engine: Engine
    ) -> None:
        first, _ = replicas
        browser = first.test_client()
        sign_in(browser, ADMIN_TOKEN)
        with engine.connect() as conn:
            signed_in_at = conn.execute(select(ui_sessions.c.last_seen_at)).scalar_one()
        for _ in range(3):
            browser.get("/ui/nowhere")
        with engine.connect() as conn:
            assert conn.execute(select(ui_sessions.c.last_seen_at)).scalar_one() == signed_in_at
        age_sessions(engine, timedelta(minutes=2))
        browser.get("/ui/nowhere")
        with engine.connect() as conn:
            seen = conn.execute(select(ui_sessions.c.last_seen_at)).scalar_one()
        assert seen > signed_in_at
        assert seen <= utc_now()

    def test_signing_in_removes_ended_and_idle_sessions(
        self, replicas: tuple[APIFlask, APIFlask], engine: Engine
    ) -> None:
        first, _ = replicas
        ended, idle, live = (first.test_client() for _ in range(3))
        sign_in(ended, ADMIN_TOKEN)
        ended.post("/ui/logout", data={"csrf_token": page_csrf(ended)})
        sign_in(idle, READ_TOKEN)
        age_sessions(engine, SESSION_LIFETIME)
        sign_in(live, ADMIN_TOKEN)
        assert session_rows(engine) == 1
        assert live.get("/ui/nowhere").status_code == 404


class TestBearerTokensOnPages:
    def test_a_wrong_bearer_token_counts_like_a_failed_sign_in(self, ui_app: APIFlask) -> None:
        stranger = ui_app.test_client()
        stranger.environ_base["HTTP_AUTHORIZATION"] = "Bearer not-a-token-at-all"
        for _ in range(FAILED_SIGN_INS_BURST):
            assert stranger.get("/ui/").status_code == 401
        refused = stranger.get("/ui/")
        assert refused.status_code == 429
        assert int(refused.headers["Retry-After"]) >= 1
        # The same limiter: the address may not try a token at the login page either.
        assert (
            ui_app.test_client().post("/ui/login", data={"token": ADMIN_TOKEN}).status_code == 429
        )

    def test_a_right_bearer_token_does_not_count(self, ui_app: APIFlask) -> None:
        admin = ui_app.test_client()
        admin.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {ADMIN_TOKEN}"
        for _ in range(FAILED_SIGN_INS_BURST + 1):
            assert admin.get("/ui/nowhere").status_code == 404


class TestCaching:
    def test_every_guarded_answer_is_not_stored(self, client: FlaskClient) -> None:
        assert client.get("/ui/").headers["Cache-Control"] == "no-store"  # the redirect
        sign_in(client, READ_TOKEN)
        for path in ("/ui/", "/ui/dummy", "/ui/nowhere"):
            assert client.get(path).headers["Cache-Control"] == "no-store", path


class TestLoginPage:
    def test_the_login_page_shows_no_navigation(self, client: FlaskClient) -> None:
        html = client.get("/ui/login").get_data(as_text=True)
        assert "<nav" not in html
        assert re.findall(r'<a [^>]*href="([^"]*)"', html) == ["#main"]  # the skip link only

    def test_the_favicon_is_served_without_sign_in(self, client: FlaskClient) -> None:
        response = client.get("/favicon.ico")
        assert response.status_code == 200
        assert response.mimetype == "image/svg+xml"
        assert b"<svg" in response.get_data()
        html = client.get("/ui/login").get_data(as_text=True)
        assert 'rel="icon"' in html
