"""What guards the pages, in a real browser: the login page offers no navigation and
loads without an error, signed-in pages are never stored, ids the store cannot hold are a
"no such page", and wrong bearer tokens are limited like failed sign-ins."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from tests.e2e._standalone import StandaloneProcess
from tests.ui.conftest import ADMIN_TOKEN, sign_in
from tickwork.services.api.ui.auth import FAILED_SIGN_INS_BURST

pytestmark = [pytest.mark.e2e]


def test_the_login_page_shows_no_navigation_and_loads_without_errors(
    page: Any, ui_server: StandaloneProcess
) -> None:
    failures: list[str] = []
    page.on("response", lambda r: failures.append(f"{r.status} {r.url}") if r.status >= 400 else 0)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(ui_server.endpoint + "/ui/projects")
    expect(page.get_by_label("Token")).to_be_visible()
    expect(page.get_by_role("navigation")).to_have_count(0)
    expect(page.locator("header a")).to_have_count(0)
    icon = page.locator("link[rel=icon]").get_attribute("href")
    assert page.request.get(ui_server.endpoint + icon).ok
    page.wait_for_load_state("load")
    assert failures == []
    assert errors == []


def test_the_favicon_answers_without_sign_in(page: Any, ui_server: StandaloneProcess) -> None:
    answer = page.request.get(ui_server.endpoint + "/favicon.ico")
    assert answer.status == 200
    assert answer.headers["content-type"].startswith("image/svg+xml")


def test_signed_in_pages_are_never_stored(page: Any, ui_server: StandaloneProcess) -> None:
    sign_in(page, ui_server, ADMIN_TOKEN)
    for path in ("/ui/", "/ui/projects", "/ui/schedules"):
        answer = page.goto(ui_server.endpoint + path)
        assert answer.headers["cache-control"] == "no-store", path


def test_ids_the_store_cannot_hold_are_no_such_page(
    page: Any, ui_server: StandaloneProcess
) -> None:
    sign_in(page, ui_server, ADMIN_TOKEN)
    csrf = page.locator("input[name=csrf_token]").first.get_attribute("value")
    too_big = "99999999999999999999"
    answer = page.goto(f"{ui_server.endpoint}/ui/schedules/{too_big}")
    assert answer.status == 404
    expect(page.get_by_text("There is no page at this address.")).to_be_visible()
    for action in (f"schedules/{too_big}/pause", f"attempts/{too_big}/kill", "schedules/0/skip"):
        posted = page.request.post(
            f"{ui_server.endpoint}/ui/{action}", form={"csrf_token": csrf}, max_redirects=0
        )
        assert posted.status == 404, action


def test_the_eleventh_wrong_bearer_token_is_refused_for_a_while(
    page: Any, ui_server: StandaloneProcess
) -> None:
    # Last in this module: it uses up this address's tries of a token.
    wrong = {"Authorization": "Bearer not-a-token-of-this-server"}
    for _ in range(FAILED_SIGN_INS_BURST):
        assert page.request.get(ui_server.endpoint + "/ui/", headers=wrong).status == 401
    refused = page.request.get(ui_server.endpoint + "/ui/", headers=wrong)
    assert refused.status == 429
    assert int(refused.headers["retry-after"]) >= 1
    # The sign-in form counts on the same limiter.
    page.goto(ui_server.endpoint + "/ui/login")
    page.get_by_label("Token").fill(ADMIN_TOKEN)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Too many requests")).to_be_visible()
