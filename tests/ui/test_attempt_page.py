"""The attempt page in a real browser: a running attempt turns green by itself, a failed
one says why on top, logs are followed live and a killed task's log is there, the task
graph draws every task shown, and a script in a param stays text."""

from __future__ import annotations

import json
import re
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from tests.e2e._standalone import StandaloneProcess, wait_for_attempt
from tests.support.files import write_under
from tests.ui.conftest import TIMEOUT_MS

pytestmark = [pytest.mark.slow]

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


def start(server: StandaloneProcess, workflow: str, **params: str) -> str:
    """Start a session of ``workflow`` now through the REST API; the attempt's id."""
    body = {"project": "pages", "workflow": workflow, "params": params}
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


def test_a_running_attempt_turns_green_without_reloading(
    server: StandaloneProcess, page: Any
) -> None:
    attempt_id = start(server, "nap")
    page.goto(f"{server.endpoint}/ui/attempts/{attempt_id}")
    page.evaluate("window.__same_page = true")
    state = page.locator("#attempt-live .facts .state").first
    expect(state).to_have_text("success", timeout=TIMEOUT_MS)
    expect(page.locator("#attempt-live table.tree tbody tr[data-state=success]")).to_have_count(3)
    expect(page.locator("#graph svg g.node.s-ok")).to_have_count(3)
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
    page.get_by_text("+fail+load", exact=True).last.click()  # its log, inline
    expect(page.locator("details.log[open] pre.log-text")).to_contain_text("loading rows")


def test_the_graph_draws_a_box_for_every_task_shown(server: StandaloneProcess, page: Any) -> None:
    attempt_id = start(server, "nap")
    wait_for_attempt(server, attempt_id)
    page.goto(f"{server.endpoint}/ui/attempts/{attempt_id}")
    rows = page.locator("table.tree tbody tr")
    expect(rows).to_have_count(3)
    expect(page.locator("#graph svg g.node")).to_have_count(rows.count())
    expect(page.locator("#graph svg path.edge")).to_have_count(1)  # +prep before +nap
    expect(page.locator("body")).to_have_attribute("data-graph-drawn", "true")


def test_a_task_box_in_the_graph_leads_to_its_row_in_the_tree(
    server: StandaloneProcess, page: Any
) -> None:
    attempt_id = start(server, "nap")
    wait_for_attempt(server, attempt_id)
    page.goto(f"{server.endpoint}/ui/attempts/{attempt_id}")
    row = page.locator("table.tree tbody tr", has_text="+prep")
    task_id = row.get_attribute("data-task-id")
    page.locator(f'#task-graph g.node[data-task-id="{task_id}"] a').click()
    expect(page).to_have_url(re.compile(f"#task-{task_id}$"))


def test_a_running_task_log_is_followed_live(server: StandaloneProcess, page: Any) -> None:
    attempt_id = start(server, "ticker")
    page.goto(f"{server.endpoint}/ui/attempts/{attempt_id}")
    page.evaluate("window.__same_page = true")
    log = page.locator('details.log[data-task="+ticker+tick"]')
    log.locator("summary").click()
    text = log.locator("pre.log-text")
    expect(text).to_contain_text("tick 1", timeout=TIMEOUT_MS)
    expect(text).not_to_contain_text("tick 8")
    expect(text).to_contain_text("tick 8", timeout=TIMEOUT_MS)
    assert page.evaluate("window.__same_page") is True


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
    log = page.locator('details.log[data-task="+sleepy+sleep"]')
    log.locator("summary").click()
    expect(log.locator("pre.log-text")).to_contain_text("going to sleep")


def test_a_script_in_a_param_shows_as_text_and_never_runs(
    server: StandaloneProcess, page: Any, tmp_path: Path
) -> None:
    attempt_id = start(server, "show", note=XSS)
    wait_for_attempt(server, attempt_id)
    page.goto(f"{server.endpoint}/ui/attempts/{attempt_id}")
    expect(page.locator("table.params code")).to_have_text(XSS)
    page.locator('details.log[data-task="+show+hello"] summary').click()
    expect(page.locator('details.log[data-task="+show+hello"] pre')).to_contain_text(XSS)
    expect(page.locator("#graph svg g.node")).to_have_count(2)
    assert page.evaluate("typeof window.__x") == "undefined"


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
        f'<script src="{static}/attempt.js"></script>',
        wait_until="commit",
    )
    # How fast is bench/ui.py's to say (graph_2000_ms); here only that it draws.
    page.wait_for_function("window.__drawn_at !== undefined")
    expect(page.locator("body")).to_have_attribute("data-graph-drawn", "true")
    shown = page.locator("#graph svg g.node").count()
    assert 1 < shown <= 101  # the first tasks, and a box standing for the rest
    expect(page.locator("#graph svg g.more")).to_have_text("… 1900 more tasks")
