"""/api/docs in a real browser: Swagger UI from the vendored files, with no other host
reachable and under the page's Content-Security-Policy (``script-src 'self'``)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import expect

from tests.e2e._standalone import StandaloneProcess

pytestmark = [pytest.mark.e2e]


def test_the_api_docs_show_the_operations_with_no_other_host_reachable(
    page: Any, open_ui_server: StandaloneProcess
) -> None:
    elsewhere: list[str] = []
    console_errors: list[str] = []

    def only_this_machine(route: Any) -> None:
        if urlsplit(route.request.url).hostname == "127.0.0.1":
            route.continue_()
        else:
            elsewhere.append(route.request.url)
            route.abort()

    page.route("**/*", only_this_machine)
    page.on(
        "console",
        lambda message: console_errors.append(message.text) if message.type == "error" else None,
    )
    response = page.goto(open_ui_server.endpoint + "/api/docs")

    # Swagger UI renders the whole document before the first operation shows: on a busy
    # machine (four test workers on two cores) that can take longer than expect's 5 s.
    first = page.locator(".opblock-summary-path", has_text="/api/projects").first
    expect(first).to_be_visible(timeout=20_000)
    expect(page.locator(".opblock").first).to_be_visible()
    assert page.locator(".opblock").count() > 20
    assert elsewhere == []
    assert console_errors == []
    policy = response.headers["content-security-policy"]
    assert "script-src 'self';" in policy
