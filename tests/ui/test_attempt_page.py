"""The attempt page in a real browser: a running attempt turns green by itself, a failed
one says why on top and opens the failed task's log in the pane beside the tree, a log
shows its ANSI colours and can be wrapped, searched and downloaded, logs are followed
live and a killed task's log is there, a group whose child runs shows running, the task
graph draws every task shown, params show as a tree, actions work from the pane, and a
script in a param stays text."""

from __future__ import annotations

import itertools
import json
import re
import textwrap
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from tests.e2e._standalone import StandaloneProcess, wait_for_attempt
from tests.support.files import write_under
from tests.ui.conftest import TIMEOUT_MS

pytestmark = [pytest.mark.slow]

PAINT = (
    "printf '\\033[31mred\\033[0m \\033[1;32mbold green\\033[0m\\n'; "
    "echo needle 1; echo needle 2; exit 2"
)
"""A command whose log has ANSI colours (red, then bold green) and two needles."""
PROJECT = {
    "nap.dig": """\
        +prep:
          sh>: echo preparing
        +nap:
          sh>: sleep 2
    """,
    "fail.dig": """\
        +load:
          sh>: echo "loading rows"; echo "table missing" ; exit 3
    """,
    "ticker.dig": """\
        +tick:
          sh>: for i in 1 2 3 4 5 6 7 8; do echo "tick $i"; sleep 0.5; done
    """,
    "sleepy.dig": """\
        +sleep:
          sh>: echo "going to sleep"; sleep 300
    """,
    "show.dig": """\
        +hello:
          echo>: ${note}
    """,
    "colours.dig": "+paint:\n  sh>: " + PAINT + "\n",
}
XSS = "<script>window.__x=1</script>"
DRAWN_AT = """new MutationObserver((changes, observer) => {
  if (document.querySelector("#graph svg")) {
    window.__drawn_at = performance.now();
    observer.disconnect();
  }
}).observe(document.documentElement, {childList: true, subtree: true});"""
"""A page script noting when (ms after the page began) the graph's SVG appeared."""


@pytest.fixture(scope="module")
def server(
    open_ui_server: StandaloneProcess, tmp_path_factory: pytest.TempPathFactory
) -> StandaloneProcess:
    """The open standalone with project ``pages`` pushed."""
    directory = tmp_path_factory.mktemp("pages")
    for name, text in PROJECT.items():
        write_under(directory, name, textwrap.dedent(text))
    pushed = open_ui_server.tickwork("push", str(directory), "--project", "pages")
    assert pushed.exit_code == 0, pushed.explain()
    return open_ui_server


SESSION_TIMES = itertools.count()
"""Numbers the sessions this module starts: two started within one second must not both
be "now" (one session each, else the second start is a 409)."""


def start(server: StandaloneProcess, workflow: str, **params: str) -> str:
    """Start a session of ``workflow`` through the REST API, at a session time of its own
    (a distinct second of 2026-01-01); the attempt's id."""
    session_time = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=next(SESSION_TIMES))
    body = {
        "project": "pages",
        "workflow": workflow,
        "session_time": session_time.isoformat(),
        "params": params,
    }
    response = httpx.post(server.endpoint + "/api/attempts", json=body, timeout=10.0)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def wait_for(what: str, check: Callable[[], Any], timeout_seconds: float = 15.0) -> Any:
    """Poll ``check`` until it returns something true; fail naming ``what``."""
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout_seconds}s")


def task_named(server: StandaloneProcess, attempt_id: str, name: str) -> dict[str, Any] | None:
    """The task of the attempt whose full name is ``name`` (None while there is none)."""
    items = server.get(f"/api/attempts/{attempt_id}/tasks")["items"]
    return next((task for task in items if task["full_name"] == name), None)


def open_row(page: Any, full_name: str) -> None:
    """Click the name of a task in the tree (its log opens in the pane)."""
    page.locator(f'#task-tree a.open-log[title="{full_name}"]').click()


def test_a_running_attempt_turns_green_without_reloading(
    server: StandaloneProcess, page: Any
) -> None:
    attempt_id = start(server, "nap")
    page.goto(f"{server.endpoint}/ui/attempts/{attempt_id}")
    page.evaluate("window.__same_page = true")
    state = page.locator("#attempt-live .facts .state").first
    expect(state).to_have_text("success", timeout=TIMEOUT_MS)
    expect(page.locator("#attempt-live table.tree tbody tr[data-state=success]")).to_have_count(3)
    expect(page.locator('#graph svg g.node[data-state="success"]')).to_have_count(3)
    assert page.evaluate("window.__same_page") is True


def test_a_failed_attempt_says_which_task_failed_why_and_the_end_of_its_log(
    server: StandaloneProcess, page: Any
) -> None:
    attempt_id = start(server, "fail")
    assert wait_for_attempt(server, attempt_id)["state"] == "error"
    failed = task_named(server, attempt_id, "+fail+load")
    assert failed is not None
    page.goto(f"{server.endpoint}/ui/attempts/{attempt_id}")
    why = page.locator("section.failures")
    expect(why.locator(".task-name")).to_have_text(["+fail+load"])
    expect(why.locator("pre.message")).to_have_text(failed["error"]["message"])
    expect(why.locator("pre.tail")).to_contain_text("table missing")
    # The failed task's log is open in the pane at once.
    pane = page.locator("#log-pane")
    expect(pane.locator(".pane-task")).to_have_text("+fail+load")
    expect(pane.locator("pre.log-view")).to_contain_text("loading rows")


def test_the_graph_draws_a_box_for_every_task_shown(server: StandaloneProcess, page: Any) -> None:
    attempt_id = start(server, "nap")
    wait_for_attempt(server, attempt_id)
    page.goto(f"{server.endpoint}/ui/attempts/{attempt_id}")
    rows = page.locator("table.tree tbody tr")
    expect(rows).to_have_count(3)
    expect(page.locator("#graph svg g.node")).to_have_count(rows.count())
    expect(page.locator("#graph svg path.edge")).to_have_count(1)  # +prep before +nap
    expect(page.locator("body")).to_have_attribute("data-graph-drawn", "true")


def test_a_task_box_in_the_graph_opens_its_log_and_marks_its_row(
    server: StandaloneProcess, page: Any
) -> None:
    attempt_id = start(server, "nap")
    wait_for_attempt(server, attempt_id)
    page.goto(f"{server.endpoint}/ui/attempts/{attempt_id}")
    row = page.locator("table.tree tbody tr", has_text="+prep")
    task_id = row.get_attribute("data-task-id")
    page.locator(f'#task-graph g.node[data-task-id="{task_id}"]').click()
    expect(page.locator("#log-pane .pane-task")).to_have_text("+nap+prep")
    expect(page.locator("#log-pane pre.log-view")).to_contain_text("preparing")
    expect(page.locator(f"#task-{task_id}")).to_have_class(re.compile("selected"))


def test_a_running_task_log_is_followed_live(server: StandaloneProcess, page: Any) -> None:
    attempt_id = start(server, "ticker")
    page.goto(f"{server.endpoint}/ui/attempts/{attempt_id}")
    page.evaluate("window.__same_page = true")
    open_row(page, "+ticker+tick")
    text = page.locator("#log-pane pre.log-view")
    expect(text).to_contain_text("tick 1", timeout=TIMEOUT_MS)
    expect(text).not_to_contain_text("tick 8")
    expect(text).to_contain_text("tick 8", timeout=TIMEOUT_MS)
    assert page.evaluate("window.__same_page") is True


def test_the_panes_state_follows_its_task_to_its_end(server: StandaloneProcess, page: Any) -> None:
    attempt_id = start(server, "ticker")
    wait_for(
        "the ticker runs",
        lambda: (task_named(server, attempt_id, "+ticker+tick") or {}).get("state") == "running",
    )
    page.goto(f"{server.endpoint}/ui/attempts/{attempt_id}")
    open_row(page, "+ticker+tick")
    state = page.locator("#log-pane .pane-state")
    expect(state).to_have_text("running")
    expect(page.locator("#log-pane .pane-running")).to_have_text(re.compile(r"^running for "))
    expect(state).to_have_text("success", timeout=TIMEOUT_MS)
    expect(page.locator("#log-pane .pane-running")).to_have_text("")


def test_the_log_of_a_killed_sleep_task_is_shown(server: StandaloneProcess, page: Any) -> None:
    attempt_id = start(server, "sleepy")
    wait_for(
        "the sleep task runs",
        lambda: (task_named(server, attempt_id, "+sleepy+sleep") or {}).get("state") == "running",
    )
    killed = server.tickwork("kill", attempt_id)
    assert killed.exit_code == 0, killed.explain()
    assert wait_for_attempt(server, attempt_id)["state"] == "killed"
    page.goto(f"{server.endpoint}/ui/attempts/{attempt_id}")
    open_row(page, "+sleepy+sleep")
    expect(page.locator("#log-pane pre.log-view")).to_contain_text("going to sleep")


def test_a_script_in_a_param_shows_as_text_and_never_runs(
    server: StandaloneProcess, page: Any, tmp_path: Path
) -> None:
    attempt_id = start(server, "show", note=XSS)
    wait_for_attempt(server, attempt_id)
    page.goto(f"{server.endpoint}/ui/attempts/{attempt_id}")
    page.locator(".params-block summary").click()
    expect(page.locator(".params-block .value-tree code")).to_have_text(XSS)
    open_row(page, "+show+hello")
    expect(page.locator("#log-pane pre.log-view")).to_contain_text(XSS)
    expect(page.locator("#graph svg g.node")).to_have_count(2)
    assert page.evaluate("typeof window.__x") == "undefined"


def failed_colours(server: StandaloneProcess, page: Any) -> str:
    """Open the page of a failed ``colours`` attempt, its log in the pane; its id."""
    attempt_id = start(server, "colours")
    assert wait_for_attempt(server, attempt_id)["state"] == "error"
    page.goto(f"{server.endpoint}/ui/attempts/{attempt_id}")
    expect(page.locator("#log-pane")).to_have_attribute("data-loaded", "true")
    return attempt_id


class TestLogPane:
    def test_ansi_colours_are_coloured_spans_and_no_escape_is_left(
        self, server: StandaloneProcess, page: Any
    ) -> None:
        failed_colours(server, page)
        log = page.locator("#log-pane pre.log-view")
        expect(log.locator("span.ansi-fg-31")).to_have_text("red")
        expect(log.locator("span.ansi-bold.ansi-fg-32")).to_have_text("bold green")
        expect(log).not_to_contain_text("[31m")
        red = log.locator("span.ansi-fg-31").evaluate("e => getComputedStyle(e).color")
        plain = log.evaluate("e => getComputedStyle(e).color")
        assert red != plain

    def test_long_lines_wrap_on_demand(self, server: StandaloneProcess, page: Any) -> None:
        failed_colours(server, page)
        log = page.locator("#log-pane pre.log-view")
        assert log.evaluate("e => getComputedStyle(e).whiteSpace") == "pre"
        page.locator("#log-pane .log-wrap").check()
        assert log.evaluate("e => getComputedStyle(e).whiteSpace") == "pre-wrap"

    def test_a_search_highlights_each_match_and_steps_through_them(
        self, server: StandaloneProcess, page: Any
    ) -> None:
        failed_colours(server, page)
        pane = page.locator("#log-pane")
        pane.locator(".log-search").fill("NEEDLE")
        expect(pane.locator("pre.log-view mark")).to_have_count(2)
        expect(pane.locator(".log-matches")).to_have_text("1 of 2")
        expect(pane.locator("pre.log-view mark.current")).to_have_text("needle")
        pane.locator(".log-next").click()
        expect(pane.locator(".log-matches")).to_have_text("2 of 2")
        pane.locator(".log-prev").click()
        expect(pane.locator(".log-matches")).to_have_text("1 of 2")

    def test_the_download_link_serves_the_whole_log(
        self, server: StandaloneProcess, page: Any
    ) -> None:
        failed_colours(server, page)
        href = page.locator("#log-pane a.log-download").get_attribute("href")
        assert href is not None and href.endswith("?download=true")
        response = page.request.get(server.endpoint + href)
        assert response.status == 200
        assert response.headers["content-disposition"].startswith("attachment")
        assert b"needle 2" in response.body()

    def test_retry_from_this_task_starts_a_new_attempt_from_the_pane(
        self, server: StandaloneProcess, page: Any
    ) -> None:
        attempt_id = failed_colours(server, page)
        form = page.locator("#log-pane form.pane-retry-from")
        expect(form.locator("input[name=from]")).to_have_value("+colours+paint")
        form.get_by_role("button", name="Retry from this task").click()
        page.wait_for_url(lambda url: f"/ui/attempts/{attempt_id}" not in url)
        new_id = page.url.rstrip("/").rsplit("/", 1)[-1]
        assert int(new_id) > int(attempt_id)


def test_a_group_whose_task_runs_shows_running_and_the_task_how_long(
    server: StandaloneProcess, page: Any
) -> None:
    attempt_id = start(server, "sleepy")
    wait_for(
        "the sleep task runs",
        lambda: (task_named(server, attempt_id, "+sleepy+sleep") or {}).get("state") == "running",
    )
    try:
        page.goto(f"{server.endpoint}/ui/attempts/{attempt_id}")
        group = page.locator("#task-tree tbody tr").first
        expect(group).to_have_attribute("data-state", "running")
        running = page.locator("#task-tree tr", has=page.locator('a[title="+sleepy+sleep"]'))
        running = running.locator(".running-for")
        expect(running).to_have_text(re.compile(r"^running for \d+\.\ds$"))
        first = running.text_content()
        expect(running).not_to_have_text(first or "", timeout=TIMEOUT_MS)  # it counts on
    finally:
        server.tickwork("kill", attempt_id)


def test_a_running_attempt_is_killed_from_the_log_pane(
    server: StandaloneProcess, page: Any
) -> None:
    attempt_id = start(server, "sleepy")
    wait_for(
        "the sleep task runs",
        lambda: (task_named(server, attempt_id, "+sleepy+sleep") or {}).get("state") == "running",
    )
    page.goto(f"{server.endpoint}/ui/attempts/{attempt_id}")
    open_row(page, "+sleepy+sleep")
    expect(page.locator("#log-pane pre.log-view")).to_contain_text("going to sleep")
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("#log-pane").get_by_role("button", name="Kill attempt").click()
    assert wait_for_attempt(server, attempt_id)["state"] == "killed"


def test_nested_params_show_as_a_tree(server: StandaloneProcess, page: Any) -> None:
    session_time = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=next(SESSION_TIMES))
    body = {
        "project": "pages",
        "workflow": "nap",
        "session_time": session_time.isoformat(),
        "params": {"target": {"db": {"host": "wh1"}}},
    }
    response = httpx.post(server.endpoint + "/api/attempts", json=body, timeout=10.0)
    assert response.status_code == 201, response.text
    page.goto(f"{server.endpoint}/ui/attempts/{response.json()['id']}")
    block = page.locator(".params-block")
    block.locator("summary").first.click()
    tree = block.locator(".value-tree")
    expect(tree.locator(".value-key", has_text="host")).to_be_visible()
    expect(tree.locator("code.value-string")).to_have_text("wh1")
    expect(block.locator("table.params")).to_be_hidden()


def chained_tasks(count: int) -> dict[str, Any]:
    """The graph data of an attempt whose one group runs ``count - 1`` tasks in a chain."""
    items = [{"id": "1", "name": "+wf", "full_name": "+wf", "parent": None, "group": True}]
    items += [
        {"id": str(n), "name": f"+step{n}", "full_name": f"+wf+step{n}", "parent": "1"}
        for n in range(2, count + 1)
    ]
    for item in items:
        item.setdefault("group", False)
        item["state"] = "success"
    edges = [[str(n), str(n + 1)] for n in range(2, count)]
    return {"tasks": items, "edges": edges}


def test_a_graph_of_2000_tasks_draws_its_first_tasks_and_one_box_for_the_rest(
    server: StandaloneProcess, page: Any
) -> None:
    static = f"{server.endpoint}/ui/static"
    data = json.dumps(chained_tasks(2000)).replace("<", "\\u003c")
    page.set_content(
        '<div id="graph"><p>graph</p></div>'
        f'<script type="application/json" id="attempt-graph">{data}</script>'
        f"<script>{DRAWN_AT}</script>"
        f'<script src="{static}/vendor/elkjs/elk.bundled.js"></script>'
        f'<script src="{static}/display.js"></script>'
        f'<script src="{static}/attempt_graph.js"></script>'
        f'<script src="{static}/attempt.js"></script>',
        wait_until="commit",
    )
    # How fast is bench/ui.py's to say (graph_2000_ms); here only that it draws.
    page.wait_for_function("window.__drawn_at !== undefined")
    expect(page.locator("body")).to_have_attribute("data-graph-drawn", "true")
    shown = page.locator("#graph svg g.node").count()
    assert 1 < shown <= 101  # the first tasks, and a box standing for the rest
    expect(page.locator("#graph svg g.more")).to_have_text("… 1900 more tasks")
