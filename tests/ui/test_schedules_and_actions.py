"""Schedules and actions in a real browser: find schedules by part of a name and by paused,
pause and resume a schedule, preview and run a backfill, start a workflow with params from
its form (nested JSON and rows, a bad value named by its field), retry from a task, kill a
running attempt after confirming (in a dialog, or without script on the page the server
answers), and state badges coloured from /ui/states.css in both colour schemes."""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from tests.e2e._standalone import StandaloneProcess, wait_for_attempt
from tests.ui.conftest import TIMEOUT_MS, VIEWPORT

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

WORKFLOWS = {
    "nightly.dig": 'timezone: UTC\nschedule:\n  daily>: "00:00:00"\n+note:\n  echo>: night\n',
    "greet.dig": "timezone: UTC\n+hello:\n  echo>: ${greeting}\n",
    "fails.dig": "timezone: UTC\n+ok:\n  echo>: fine\n+boom:\n  sh>: exit 3\n",
    "slow.dig": "timezone: UTC\n+nap:\n  sh>: sleep 60\n",
    "Weekly_Digest.dig": (
        'timezone: UTC\nschedule:\n  weekly>: "Sun,00:00:00"\n+note:\n  echo>: week\n'
    ),
}
ATTEMPT_URL = re.compile(r".*/ui/attempts/(\d+)$")


@pytest.fixture(scope="module")
def server(
    open_ui_server: StandaloneProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StandaloneProcess]:
    """The open standalone with project ``ui`` pushed: a schedule and three workflows."""
    project: Path = tmp_path_factory.mktemp("ui-project")
    for name, text in WORKFLOWS.items():
        (project / name).write_text(text, encoding="utf-8")
    pushed = open_ui_server.tickwork("push", str(project), "--project", "ui")
    assert pushed.exit_code == 0, pushed.explain()
    yield open_ui_server


_SESSIONS = itertools.count()


def start(server: StandaloneProcess, workflow: str) -> str:
    """Start a new session of ``workflow`` over REST; its attempt's id. Each start names a
    session time of its own: two starts within a second would otherwise name one session."""
    minute = next(_SESSIONS)
    session_time = f"2025-01-01T{minute // 60:02d}:{minute % 60:02d}:00+00:00"
    body = {"project": "ui", "workflow": workflow, "session_time": session_time}
    response = httpx.post(server.endpoint + "/api/attempts", json=body, timeout=10.0)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def attempt_id_of(page: Any) -> str:
    found = ATTEMPT_URL.match(page.url)
    assert found is not None, page.url
    return found.group(1)


def wait_for_state(server: StandaloneProcess, attempt_id: str, state: str) -> None:
    deadline = time.monotonic() + 20
    while server.get(f"/api/attempts/{attempt_id}")["state"] != state:
        assert time.monotonic() < deadline, f"attempt {attempt_id} never became {state}"
        time.sleep(0.1)


def open_schedule(page: Any, server: StandaloneProcess) -> None:
    page.goto(server.endpoint + "/ui/schedules?project=ui")
    page.get_by_role("link", name="nightly").click()
    expect(page.get_by_role("heading", name="Schedule of ui/nightly")).to_be_visible()


def test_pause_and_resume_a_schedule(page: Any, server: StandaloneProcess) -> None:
    open_schedule(page, server)
    page.get_by_role("button", name="Pause").click()
    expect(page.get_by_role("status")).to_contain_text("Paused ui/nightly.")
    expect(page.locator("dl.facts")).to_contain_text("paused")
    page.get_by_label("Replay").check()
    page.get_by_role("button", name="Resume").click()
    expect(page.get_by_role("status")).to_contain_text("Resumed ui/nightly")
    expect(page.locator("dl.facts")).to_contain_text("active")
    assert server.get("/api/schedules?project=ui")["items"][0]["paused"] is False


def test_preview_then_run_a_backfill(page: Any, server: StandaloneProcess) -> None:
    today = datetime.now(UTC).date()
    first, last = today - timedelta(days=4), today - timedelta(days=2)
    open_schedule(page, server)
    page.locator("#backfill-from").fill(first.isoformat())
    page.locator("#backfill-to").fill(last.isoformat())
    page.get_by_role("button", name="Preview").click()
    expect(page.locator("ol.created li")).to_have_count(3)
    assert server.get("/api/sessions?project=ui&workflow=nightly")["items"] == []
    page.get_by_role("button", name=re.compile("Run backfill")).click()
    expect(page.get_by_role("status")).to_contain_text("created 3, 0 existed")
    sessions = server.get("/api/sessions?project=ui&workflow=nightly")["items"]
    assert len(sessions) == 3


def test_start_a_workflow_with_params_from_the_form(page: Any, server: StandaloneProcess) -> None:
    page.goto(server.endpoint + "/ui/projects/ui/workflows/greet/start")
    page.get_by_label("Session time").fill("2026-11-01 06:00:00")
    page.get_by_label("Param 1 key").fill("greeting")
    page.get_by_label("Param 1 value").fill("hello from the form")
    page.get_by_role("button", name="Add a param").click()
    page.get_by_label("Param 6 key").fill("extra")
    page.get_by_label("Param 6 value").fill("row added by script")
    page.get_by_role("button", name="Start").click()
    page.wait_for_url(ATTEMPT_URL)
    attempt = wait_for_attempt(server, attempt_id_of(page))
    assert attempt["state"] == "success"
    assert attempt["session_time"] == "2026-11-01T06:00:00Z"
    assert attempt["params"] == {"greeting": "hello from the form", "extra": "row added by script"}


def test_retry_from_a_task(page: Any, server: StandaloneProcess) -> None:
    failed = start(server, "fails")
    assert wait_for_attempt(server, failed)["state"] == "error"
    page.goto(server.endpoint + f"/ui/attempts/{failed}")
    expect(page.get_by_label("Retry from")).to_have_value("+fails+boom")
    page.get_by_role("button", name="Retry from task").click()
    page.wait_for_url(ATTEMPT_URL)
    expect(page.get_by_role("status")).to_contain_text(f"Retrying attempt {failed} (+fails+boom)")
    retried = server.get(f"/api/attempts/{attempt_id_of(page)}")
    assert retried["resume_from_attempt_id"] == failed
    assert retried["resume_only"] == ["+fails+ok"]


def test_kill_a_sleeping_attempt_after_confirming(page: Any, server: StandaloneProcess) -> None:
    attempt_id = start(server, "slow")
    wait_for_state(server, attempt_id, "running")
    page.goto(server.endpoint + f"/ui/attempts/{attempt_id}")
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.get_by_role("button", name="Kill").click()
    assert server.get(f"/api/attempts/{attempt_id}")["state"] == "running"
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Kill").click()
    expect(page.get_by_role("status")).to_contain_text(f"Killing attempt {attempt_id}")
    assert wait_for_attempt(server, attempt_id)["state"] == "killed"


def test_without_script_the_server_asks_before_a_kill(
    browser: Any, server: StandaloneProcess
) -> None:
    attempt_id = start(server, "slow")
    wait_for_state(server, attempt_id, "running")
    context = browser.new_context(viewport=VIEWPORT, java_script_enabled=False)
    context.set_default_timeout(TIMEOUT_MS)
    try:
        page = context.new_page()
        page.goto(server.endpoint + f"/ui/attempts/{attempt_id}")
        page.get_by_role("button", name="Kill").click()
        expect(page.get_by_role("heading", name=f"Kill attempt {attempt_id}?")).to_be_visible()
        assert server.get(f"/api/attempts/{attempt_id}")["state"] == "running"
        page.get_by_role("button", name=f"Kill attempt {attempt_id}").click()
        page.wait_for_url(ATTEMPT_URL)
    finally:
        context.close()
    assert wait_for_attempt(server, attempt_id)["state"] == "killed"


def listed_workflows(page: Any) -> list[str]:
    return [
        text.strip()
        for text in page.locator("table.schedules tbody tr td:nth-child(2)").all_inner_texts()
    ]


def test_search_and_the_paused_filter_narrow_the_schedule_list(
    page: Any, server: StandaloneProcess
) -> None:
    nightly = next(
        item["id"]
        for item in server.get("/api/schedules?project=ui")["items"]
        if item["workflow"] == "nightly"
    )
    page.goto(server.endpoint + "/ui/schedules")
    # When part of a name is searched, in another case
    page.get_by_label("Search").fill("digest")
    page.get_by_role("button", name="Filter").click()
    # Then only the schedules whose name holds it are listed, and the box keeps it
    expect(page.locator("table.schedules tbody tr")).to_have_count(1)
    assert listed_workflows(page) == ["Weekly_Digest"]
    expect(page.get_by_label("Search")).to_have_value("digest")

    # Given nightly is paused
    response = httpx.post(f"{server.endpoint}/api/schedules/{nightly}/pause", timeout=10.0)
    assert response.status_code == 200, response.text
    try:
        # When the list shows paused schedules only
        page.get_by_label("Search").fill("")
        page.get_by_label("Paused").select_option("yes")
        page.get_by_role("button", name="Filter").click()
        # Then nightly alone is listed, its badge saying paused
        expect(page.locator("table.schedules tbody tr")).to_have_count(1)
        assert listed_workflows(page) == ["nightly"]
        expect(page.locator("table.schedules .state-paused")).to_have_text("paused")
        # And unpaused ones exclude it
        page.get_by_label("Paused").select_option("no")
        page.get_by_role("button", name="Filter").click()
        expect(page.locator("table.schedules tbody tr")).to_have_count(1)
        assert listed_workflows(page) == ["Weekly_Digest"]
    finally:
        httpx.post(f"{server.endpoint}/api/schedules/{nightly}/resume", json={}, timeout=10.0)


def test_the_start_form_builds_nested_params_and_names_a_bad_value(
    page: Any, server: StandaloneProcess
) -> None:
    page.goto(server.endpoint + "/ui/projects/ui/workflows/greet/start")
    page.get_by_label("Session time").fill("2026-11-02 06:00:00")
    # When the JSON field holds something that is not JSON
    page.get_by_label("Params as JSON").fill('{"greeting": "hi",\n "opts": }')
    page.get_by_label("Param 1 key").fill("opts.mode")
    page.get_by_label("Param 1 value").fill("fast")
    page.get_by_role("button", name="Start").click()
    # Then the form comes back naming that field and where, keeping what was entered
    error = page.locator("#start-params_json-error")
    expect(error).to_contain_text("Params as JSON: not JSON at line 2 column")
    expect(page.get_by_label("Params as JSON")).to_have_attribute("aria-invalid", "true")
    expect(page.get_by_label("Param 1 key")).to_have_value("opts.mode")
    assert server.get("/api/sessions?project=ui&workflow=greet&from=2026-11-02")["items"] == []

    # When it is mended: nested objects, a number and a list, and a row nesting into them
    page.get_by_label("Params as JSON").fill(
        '{"greeting": "hi", "opts": {"n": 3, "tags": ["a", "b"]}}'
    )
    page.get_by_role("button", name="Start").click()
    page.wait_for_url(ATTEMPT_URL)
    # Then the attempt has the params with their types, the row merged in
    attempt = wait_for_attempt(server, attempt_id_of(page))
    assert attempt["params"] == {
        "greeting": "hi",
        "opts": {"n": 3, "tags": ["a", "b"], "mode": "fast"},
    }


@pytest.mark.parametrize(("scheme", "killed"), [("light", "#8c1d40"), ("dark", "#f778ba")])
def test_state_colours_come_from_the_states_stylesheet_in_each_scheme(
    browser: Any, server: StandaloneProcess, scheme: str, killed: str
) -> None:
    context = browser.new_context(viewport=VIEWPORT, color_scheme=scheme)
    context.set_default_timeout(TIMEOUT_MS)
    try:
        page = context.new_page()
        page.goto(server.endpoint + "/ui/schedules?project=ui")
        read = "name => getComputedStyle(document.documentElement).getPropertyValue(name).trim()"
        assert page.evaluate(read, "--state-killed") == killed
        active = page.evaluate(read, "--state-active")
        badge = page.locator("table.schedules .state-active").first
        expected = page.evaluate(
            "colour => { const probe = document.createElement('span');"
            " probe.style.color = colour; document.body.append(probe);"
            " const shown = getComputedStyle(probe).color; probe.remove(); return shown; }",
            active,
        )
        expect(badge).to_have_css("color", expected)
    finally:
        context.close()
