"""Signing out ends the session everywhere, in a real browser: a cookie copied into a
second browser before "Sign out" opens no page and pauses no schedule afterwards, on a
standalone (SQLite) and across two API replicas on one PostgreSQL store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from tests.e2e._standalone import StandaloneProcess
from tests.fault._cluster import Cluster
from tests.ui.conftest import ADMIN_TOKEN, TIMEOUT_MS, TOKENS, VIEWPORT, sign_in
from tickwork.shared.dsl.archive import pack_project

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

NIGHTLY = 'timezone: UTC\nschedule:\n  daily>: "00:00:00"\n+note:\n  echo>: night\n'


@pytest.fixture(scope="module")
def server(
    ui_server: StandaloneProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StandaloneProcess]:
    """The standalone with tokens, project ``copies`` (one schedule) pushed."""
    project: Path = tmp_path_factory.mktemp("copies-project")
    (project / "nightly.dig").write_text(NIGHTLY, encoding="utf-8")
    pushed = ui_server.tickwork("push", str(project), "--project", "copies")
    assert pushed.exit_code == 0, pushed.explain()
    yield ui_server


@pytest.fixture
def second_browser(browser: Any) -> Iterator[Any]:
    """Another browser context: what someone holding a copy of the cookie uses."""
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(TIMEOUT_MS)
    try:
        yield context
    finally:
        context.close()


def schedule_state(endpoint: str, project: str) -> str:
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    found = httpx.get(
        f"{endpoint}/api/schedules", params={"project": project}, headers=headers, timeout=10.0
    )
    assert found.status_code == 200, found.text
    (schedule,) = found.json()["items"]
    state: str = schedule["state"]
    return state


def open_schedule(page: Any, endpoint: str, project: str) -> None:
    page.goto(f"{endpoint}/ui/schedules?project={project}")
    page.get_by_role("link", name="nightly").click()
    expect(page.get_by_role("heading", name=f"Schedule of {project}/nightly")).to_be_visible()


def sign_out(page: Any) -> None:
    page.locator("header .who").get_by_role("button", name="Sign out").click()
    expect(page.get_by_label("Token")).to_be_visible()


def expect_login_page(page: Any) -> None:
    expect(page.get_by_label("Token")).to_be_visible()
    assert "/ui/login" in page.url


def pause_refused(form: Any) -> None:
    """Click Pause on a schedule page opened before signing out: the login page answers."""
    form.get_by_role("button", name="Pause").click()
    expect_login_page(form)


def test_a_cookie_copied_before_sign_out_opens_no_page_and_pauses_nothing_after_it(
    page: Any, second_browser: Any, server: StandaloneProcess
) -> None:
    # Given an admin signed in, and a copy of the cookie in a second browser, one of
    # whose tabs holds the schedule's page with its Pause form
    sign_in(page, server, ADMIN_TOKEN)
    second_browser.add_cookies(page.context.cookies())
    form = second_browser.new_page()
    open_schedule(form, server.endpoint, "copies")
    # When the admin signs out
    sign_out(page)
    # Then the copy opens no page
    other = second_browser.new_page()
    other.goto(server.endpoint + "/ui/projects")
    expect_login_page(other)
    # and the Pause form it still shows pauses nothing
    pause_refused(form)
    assert schedule_state(server.endpoint, "copies") == "active"


def push_nightly(endpoint: str, project: str, directory: Path) -> None:
    directory.mkdir()
    (directory / "nightly.dig").write_text(NIGHTLY, encoding="utf-8")
    pushed = httpx.put(
        f"{endpoint}/api/projects/{project}",
        content=pack_project(directory),
        headers={"Content-Type": "application/gzip", "Authorization": f"Bearer {ADMIN_TOKEN}"},
        timeout=30.0,
    )
    assert pushed.status_code == 201, pushed.text


def test_signing_out_on_one_replica_ends_every_copy_on_both(
    page: Any, second_browser: Any, cluster: Cluster, tmp_path: Path
) -> None:
    # Given two API replicas (separate processes) on one PostgreSQL store
    replicas = [cluster.start_api(TOKENS, workers=1, name=name) for name in ("api-1", "api-2")]
    one, two = (f"http://127.0.0.1:{replica.metrics_port}" for replica in replicas)
    push_nightly(one, "replicas", tmp_path / "replicas-project")
    # and an admin signed in on the first, whose cookie is copied into a second browser
    # (cookies are per host, not per port: each browser shows it to both replicas) that
    # holds the schedule's page of each replica in a tab
    page.goto(one + "/ui/login")
    page.get_by_label("Token").fill(ADMIN_TOKEN)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(lambda url: "/ui/login" not in url)
    second_browser.add_cookies(page.context.cookies())
    forms = [second_browser.new_page(), second_browser.new_page()]
    for form, endpoint in zip(forms, (one, two), strict=True):
        open_schedule(form, endpoint, "replicas")
    # When the admin signs out on the second replica
    page.goto(two + "/ui/projects")
    sign_out(page)
    # Then the copy opens no page on either replica
    other = second_browser.new_page()
    for endpoint in (one, two):
        other.goto(endpoint + "/ui/projects")
        expect_login_page(other)
    # and pauses the schedule through neither
    for form in forms:
        pause_refused(form)
    assert schedule_state(one, "replicas") == "active"
