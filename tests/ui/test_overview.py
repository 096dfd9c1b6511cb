"""The overview and the workflow page in a real browser: a failure shows with its task and
error on the overview, and the workflow's grid colours each task and links to its attempt."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.e2e._run import EXAMPLES_DIR
from tests.e2e._standalone import StandaloneProcess, wait_for_attempt

pytestmark = [pytest.mark.slow]


def state_colour(page: Any, state: str) -> str:
    """The colour /ui/states.css gives ``state`` (its ``--state-NAME``), as CSS reads it
    back: ``rgb(r, g, b)``."""
    value = page.evaluate(
        "name => getComputedStyle(document.documentElement).getPropertyValue(name).trim()",
        f"--state-{state}",
    )
    assert re.fullmatch(r"#[0-9a-fA-F]{6}", value), f"--state-{state} is {value!r}"
    red, green, blue = (int(value[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgb({red}, {green}, {blue})"


@pytest.fixture(scope="module")
def runs(open_ui_server: StandaloneProcess) -> dict[str, str]:
    """The examples pushed; ``error_handler`` run (it fails at +load) and ``sequence``
    run (it succeeds): their attempt ids by workflow."""
    pushed = open_ui_server.tickwork("push", str(EXAMPLES_DIR), "--project", "examples")
    assert pushed.exit_code == 0, pushed.explain()
    found = {}
    for workflow in ("error_handler", "sequence"):
        started = open_ui_server.tickwork("start", "examples", workflow, "--json")
        assert started.exit_code == 0, started.explain()
        found[workflow] = str(started.json()["id"])
    for attempt_id in found.values():
        wait_for_attempt(open_ui_server, attempt_id)
    return found


def test_a_failure_shows_on_the_overview_with_its_task_and_error(
    page: Any, open_ui_server: StandaloneProcess, runs: dict[str, str]
) -> None:
    page.goto(open_ui_server.endpoint + "/")

    failures = page.locator("#failures")
    failed = failures.locator(
        "tr.failure", has=page.locator(f'a[href="/ui/attempts/{runs["error_handler"]}"]')
    )
    expect(failed).to_have_count(1)
    expect(failed.locator("td.task")).to_have_text("+error_handler+load")
    expect(failed.locator("td.error")).to_contain_text("warehouse is read-only for maintenance")
    expect(failures.locator(f'a[href="/ui/attempts/{runs["sequence"]}"]')).to_have_count(0)


def test_the_workflow_grid_colours_each_task_and_links_to_its_attempt(
    page: Any, open_ui_server: StandaloneProcess, runs: dict[str, str]
) -> None:
    page.goto(open_ui_server.endpoint + "/ui/projects/examples/workflows/error_handler")

    grid = page.locator("#grid table.grid")
    load = grid.locator("tr", has=page.locator("th code", has_text="+error_handler+load"))
    cell = load.locator("a.cell")
    expect(cell).to_have_attribute("href", f"/ui/attempts/{runs['error_handler']}")
    expect(cell).to_have_css("background-color", state_colour(page, "error"))
    expect(cell).to_have_attribute("title", re.compile(r"^\+error_handler\+load · error · 20\d\d-"))
    extract = grid.locator("tr", has=page.locator("th code", has_text="+error_handler+extract"))
    expect(extract.locator("a.cell")).to_have_css("background-color", state_colour(page, "success"))

    cell.click()
    expect(page).to_have_url(f"{open_ui_server.endpoint}/ui/attempts/{runs['error_handler']}")
