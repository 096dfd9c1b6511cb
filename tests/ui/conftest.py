"""Fixtures of the UI's specs: a live ``tickwork standalone`` with a read and an admin
token, and pages of a real Chromium (tests/support/browser.py) signed in as either."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e._standalone import StandaloneProcess, running_standalone
from tests.support.browser import BROWSER_PACKAGE, browser_required, chromium_path

ADMIN_TOKEN = "ui-admin-token-0001"
READ_TOKEN = "ui-read-token-00001"
TOKENS = f"admin:{ADMIN_TOKEN},read:{READ_TOKEN}"
VIEWPORT = {"width": 1280, "height": 800}
PHONE_VIEWPORT = {"width": 390, "height": 844}
TIMEOUT_MS = 15_000

pytestmark = [pytest.mark.e2e]


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """One headless Chromium for the session's UI specs."""
    executable = chromium_path()
    if executable is None:
        message = f"no Chromium: install Debian's {BROWSER_PACKAGE} package"
        if browser_required():
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import expect, sync_playwright

    # Assertions wait as long as actions (TIMEOUT_MS, set on each page's context) instead
    # of their own 5 s: on a loaded 2-core machine a 2,000-task graph takes longer to draw.
    expect.set_options(timeout=TIMEOUT_MS)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=executable, args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
def ui_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """A standalone whose API (and UI) takes the read and the admin token."""
    state_dir: Path = tmp_path_factory.mktemp("ui") / "state"
    environ = {"TICKWORK_API_TOKENS": TOKENS}
    with running_standalone(state_dir, environ=environ) as standalone:
        yield standalone


@pytest.fixture(scope="module")
def open_ui_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    """A standalone on loopback without tokens: its API and UI need no sign-in."""
    state_dir: Path = tmp_path_factory.mktemp("ui-open") / "state"
    with running_standalone(state_dir) as standalone:
        yield standalone


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh browser context (no cookies) and page at 1280 by 800 pixels."""
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(TIMEOUT_MS)
    try:
        yield context.new_page()
    finally:
        context.close()


def sign_in(page: Any, server: StandaloneProcess, token: str) -> None:
    """Sign in through the login page with ``token``."""
    page.goto(server.endpoint + "/ui/login")
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(lambda url: "/ui/login" not in url)
