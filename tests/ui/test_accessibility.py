"""Every page of the UI is accessible (axe-core finds nothing serious or critical) at
1280 by 800 and at a phone's 390 by 844, and fits a phone's width without scrolling sideways.

The pages are found in the application's URL map (every GET rule under /ui but its static
files), so a page added later is checked without editing this file. A rule's path
arguments are filled from a standalone where the examples were pushed and an attempt
failed; a rule that does not answer with a whole HTML document (a fragment, a stream, a
download, a view that needs a query) is left to the page that uses it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e._standalone import StandaloneProcess, wait_for_attempt
from tests.support.axe import describe, serious_violations
from tests.ui.conftest import PHONE_VIEWPORT, TIMEOUT_MS, VIEWPORT
from tickwork.services.api.app import create_app
from tickwork.services.api.config import ApiConfig
from tickwork.services.api.ui import UI_PREFIX

pytestmark = [pytest.mark.e2e]

EXAMPLES = "examples"
FAILING_WORKFLOW = "retry_notify"
RULE_ARGUMENT = re.compile(r"<(?:(\w+)(?:\([^)]*\))?:)?(\w+)>")
NUMERIC_CONVERTERS = ("id", "int")
VIEWPORTS = {"desktop": VIEWPORT, "phone": PHONE_VIEWPORT}


def ui_page_rules() -> list[str]:
    """The rules of the UI's pages: every GET rule under /ui except its static files."""
    app = create_app(ApiConfig(database_url="sqlite://", auth_enabled=False))
    rules = {
        rule.rule
        for rule in app.url_map.iter_rules()
        if "GET" in (rule.methods or ())
        and rule.rule.startswith(UI_PREFIX + "/")
        and not rule.rule.startswith(UI_PREFIX + "/static/")
    }
    return sorted(rules)


PAGE_RULES = ui_page_rules()


@pytest.fixture(scope="module")
def known(open_ui_server: StandaloneProcess) -> dict[str, str]:
    """Values for a rule's path arguments, by what they name (``<kind>`` or ``<kind>_id``):
    the pushed examples and a finished attempt that failed."""
    pushed = open_ui_server.tickwork("push", EXAMPLES, "--project", EXAMPLES)
    assert pushed.exit_code == 0, pushed.explain()
    started = open_ui_server.tickwork("start", EXAMPLES, FAILING_WORKFLOW, "--json")
    assert started.exit_code == 0, started.explain()
    attempt = wait_for_attempt(open_ui_server, str(started.json()["id"]))
    tasks = open_ui_server.get(f"/api/attempts/{attempt['id']}/tasks")["items"]
    failed = next(task for task in tasks if task["state"] == "error" and not task["is_group"])
    schedule = open_ui_server.get(f"/api/schedules?project={EXAMPLES}")["items"][0]
    revision = open_ui_server.get(f"/api/projects/{EXAMPLES}/revisions")["items"][0]
    log_file = open_ui_server.get(f"/api/logs/{attempt['id']}/files")["items"][0]
    return {
        "name": EXAMPLES,
        "project": EXAMPLES,
        "project_id": attempt["project_id"],
        "workflow": attempt["workflow"],
        "workflow_id": attempt["workflow_definition_id"],
        "session_id": attempt["session_id"],
        "attempt_id": attempt["id"],
        "task": failed["full_name"],
        "task_id": failed["id"],
        "schedule_id": schedule["id"],
        "revision": revision["name"],
        "revision_id": revision["id"],
        "file_id": log_file["id"],
    }


def page_path(rule: str, known: dict[str, str]) -> str:
    """``rule`` with each path argument replaced by the known value it names."""

    def value(match: re.Match[str]) -> str:
        converter, argument = match.group(1), match.group(2)
        kind = argument.removesuffix("_id").removesuffix("_name")
        wanted = f"{kind}_id" if converter in NUMERIC_CONVERTERS else argument
        for key in (wanted, argument, kind):
            if key in known:
                return known[key]
        pytest.fail(f"{rule}: no known value for <{argument}>; add one to the `known` fixture")

    return RULE_ARGUMENT.sub(value, rule)


def require_html_page(url: str) -> None:
    """Skip unless ``url`` answers with a whole HTML document (or with 400: it needs a query
    this spec cannot know); fail on another error status."""
    with httpx.stream("GET", url, timeout=10.0, follow_redirects=True) as response:
        if response.status_code == 400:
            pytest.skip(f"{url} needs a query (400 without one)")
        assert response.status_code < 400, f"{url} answered {response.status_code}"
        media_type = response.headers.get("content-type", "")
        start = next(response.iter_bytes(), b"") if media_type.startswith("text/html") else b""
    if not start.lstrip().lower().startswith(b"<!doctype html"):
        pytest.skip(f"{url} is not a page ({media_type or 'no media type'})")


@pytest.fixture
def visit(browser: Any, open_ui_server: StandaloneProcess) -> Iterator[Any]:
    """Open a path of the open server at a named viewport size; returns the page."""
    contexts: list[Any] = []

    def open_page(path: str, viewport: str) -> Any:
        url = open_ui_server.endpoint + path
        require_html_page(url)
        context = browser.new_context(viewport=VIEWPORTS[viewport])
        context.set_default_timeout(TIMEOUT_MS)
        contexts.append(context)
        page = context.new_page()
        page.goto(url)
        page.wait_for_load_state("load")
        return page

    yield open_page
    for context in contexts:
        context.close()


@pytest.mark.parametrize("viewport", list(VIEWPORTS))
@pytest.mark.parametrize("rule", PAGE_RULES)
def test_a_page_has_no_serious_or_critical_accessibility_violation(
    visit: Any, known: dict[str, str], rule: str, viewport: str
) -> None:
    page = visit(page_path(rule, known), viewport)
    violations = serious_violations(page)
    assert violations == [], f"{page.url} at {viewport} width:\n{describe(violations)}"


@pytest.mark.parametrize("rule", PAGE_RULES)
def test_a_page_fits_a_phone_screen_without_scrolling_sideways(
    visit: Any, known: dict[str, str], rule: str
) -> None:
    page = visit(page_path(rule, known), "phone")
    widths = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1] + 1, (
        f"{page.url} is {widths[0]}px wide on a {widths[1]}px screen "
        "(a wide table belongs in a .table-wrap, which scrolls inside the page)"
    )
