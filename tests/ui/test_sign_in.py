"""Signing in to the web UI in a real browser: each role, signing out, a wrong token, and
a server without tokens."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from tests.e2e._standalone import StandaloneProcess
from tests.ui.conftest import ADMIN_TOKEN, READ_TOKEN, sign_in
from tickwork.services.api.ui.auth import AUTH_OFF_NOTICE

pytestmark = [pytest.mark.e2e]


@pytest.mark.parametrize(
    ("token", "shown"),
    [
        (ADMIN_TOKEN, "Signed in as env:admin, an admin token"),
        (READ_TOKEN, "Signed in as env:read, a read token (read only)"),
    ],
)
def test_signing_in_shows_the_role_and_signing_out_ends_it(
    page: Any, ui_server: StandaloneProcess, token: str, shown: str
) -> None:
    page.goto(ui_server.endpoint + "/ui/projects")
    expect(page).to_have_url(ui_server.endpoint + "/ui/login?next=%2Fui%2Fprojects")
    sign_in(page, ui_server, token)
    who = page.locator("header .who")
    expect(who).to_contain_text(shown)
    who.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(ui_server.endpoint + "/ui/login")
    page.goto(ui_server.endpoint + "/ui/")
    expect(page.get_by_label("Token")).to_be_visible()


def test_signing_in_leads_back_to_the_page_asked_for(
    page: Any, ui_server: StandaloneProcess
) -> None:
    page.goto(ui_server.endpoint + "/ui/sessions?state=error")
    page.get_by_label("Token").fill(READ_TOKEN)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(ui_server.endpoint + "/ui/sessions?state=error")


def test_a_wrong_token_shows_an_error_on_the_login_page(
    page: Any, ui_server: StandaloneProcess
) -> None:
    page.goto(ui_server.endpoint + "/ui/login")
    page.get_by_label("Token").fill("not-a-token-of-this-server")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_have_text("That token is not valid.")
    expect(page.get_by_label("Token")).to_be_visible()
    assert page.context.cookies() == []


def test_without_tokens_pages_are_open_and_say_so(
    page: Any, open_ui_server: StandaloneProcess
) -> None:
    page.goto(open_ui_server.endpoint + "/ui/login")
    expect(page).not_to_have_url(open_ui_server.endpoint + "/ui/login")
    expect(page.locator("header .who")).to_have_text(AUTH_OFF_NOTICE)
