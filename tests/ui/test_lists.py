"""The lists in a real browser: the sessions and attempts lists and the overview follow a
running attempt without a reload and keep their filters, names match in part and in any
case, the header's search box finds projects, workflows and ids, times follow the zone
chosen in the header (remembered), durations and "running for" show, and every page
reads on a 390-pixel phone and in a dark room."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.e2e._run import EXAMPLES_DIR
from tests.e2e._standalone import StandaloneProcess, wait_for_attempt
from tests.support.axe import describe, serious_violations
from tests.support.waiting import wait_until
from tests.ui.conftest import PHONE_VIEWPORT, TIMEOUT_MS

pytestmark = [pytest.mark.slow]

GATE_SECONDS = 90
"""Longest the gated workflow waits for its gate file before it gives up (and fails)."""
LIVE_WAIT_MS = 20_000
"""Longest a list takes to show a change by itself (it polls every few seconds)."""

GATED = (
    "timezone: Asia/Tokyo\n\n+wait:\n  sh>: i=0; "
    "while [ ! -e {gate} ] && [ $i -lt {ticks} ]; do sleep 0.2; i=$((i+1)); done; "
    "test -e {gate}\n"
)


@dataclass(frozen=True)
class Runs:
    """What the module's server holds: the examples and a gated project, with attempt ids."""

    failed: str
    succeeded: str
    gate_dir: Path


@pytest.fixture(scope="module")
def runs(open_ui_server: StandaloneProcess, tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """The examples pushed as ``examples`` (``error_handler`` failed, ``sequence``
    succeeded), and ``Night-Shift`` whose ``Gated_Load`` runs until a gate file exists."""
    pushed = open_ui_server.tickwork("push", str(EXAMPLES_DIR), "--project", "examples")
    assert pushed.exit_code == 0, pushed.explain()
    found = {}
    for workflow in ("error_handler", "sequence"):
        started = open_ui_server.tickwork("start", "examples", workflow, "--json")
        assert started.exit_code == 0, started.explain()
        found[workflow] = str(started.json()["id"])
    for attempt_id in found.values():
        wait_for_attempt(open_ui_server, attempt_id)
    gate_dir = tmp_path_factory.mktemp("gates")
    project = tmp_path_factory.mktemp("night-shift")
    (project / "Gated_Load.dig").write_text(
        GATED.format(gate=gate_dir / "open", ticks=GATE_SECONDS * 5)
    )
    pushed = open_ui_server.tickwork("push", str(project), "--project", "Night-Shift")
    assert pushed.exit_code == 0, pushed.explain()
    return Runs(found["error_handler"], found["sequence"], gate_dir)


_gated_starts = itertools.count()


def start_gated(server: StandaloneProcess) -> Any:
    """Start ``Gated_Load`` for a session time of its own (two starts in the same second
    would otherwise name the same session)."""
    session_time = f"2026-01-01T00:{next(_gated_starts) % 60:02d}:00+09:00"
    return server.tickwork(
        "start", "Night-Shift", "Gated_Load", "--session", session_time, "--json"
    )


@pytest.fixture
def gated_attempt(open_ui_server: StandaloneProcess, runs: Runs) -> Iterator[str]:
    """A running attempt of ``Gated_Load``: the gate is opened when the test ends."""
    gate = runs.gate_dir / "open"
    gate.unlink(missing_ok=True)
    started = start_gated(open_ui_server)
    assert started.exit_code == 0, started.explain()
    attempt_id = str(started.json()["id"])
    try:
        wait_until(
            f"attempt {attempt_id} runs",
            lambda: open_ui_server.get(f"/api/attempts/{attempt_id}")["state"] == "running",
            timeout_seconds=30,
            poll=0.1,
        )
        yield attempt_id
    finally:
        gate.touch()
        wait_for_attempt(open_ui_server, attempt_id)


SET_HIDDEN = """hidden => {
  window.__hidden = hidden;
  document.dispatchEvent(new Event("visibilitychange"));
}"""
"""Makes the page's ``document.hidden`` (as the init script of a spec defines it) say
``hidden``, and tells the page, as a browser does when its tab is hidden or shown."""


def _row(page: Any, attempt_id: str) -> Any:
    return page.locator(f'#live-list tr[data-attempt="{attempt_id}"]')


class TestLiveLists:
    def test_the_attempts_list_follows_a_running_attempt_and_keeps_filters_and_typing(
        self, page: Any, open_ui_server: StandaloneProcess, runs: Runs, gated_attempt: str
    ) -> None:
        # Given the attempts list filtered to part of the project's name, in other case
        page.goto(open_ui_server.endpoint + "/ui/attempts?project_contains=night")
        row = _row(page, gated_attempt)
        expect(row.locator("td.state-cell")).to_have_text("running", timeout=LIVE_WAIT_MS)
        expect(row.locator("td.duration")).to_contain_text("running for")
        # and someone typing in a filter field
        field = page.get_by_label("Workflow", exact=True)
        field.fill("gat")
        # When the attempt ends
        (runs.gate_dir / "open").touch()
        # Then its row changes without a reload, the filter stays, and the typing too
        expect(row.locator("td.state-cell")).to_have_text("success", timeout=LIVE_WAIT_MS)
        expect(row.locator("td.duration")).to_have_text(re.compile(r"^\d+(\.\d)?s$|^\d+m"))
        expect(page).to_have_url(re.compile(r"/ui/attempts\?project_contains=night$"))
        expect(field).to_be_focused()
        expect(field).to_have_value("gat")

    def test_the_sessions_list_shows_a_new_running_session_without_a_reload(
        self, page: Any, open_ui_server: StandaloneProcess, runs: Runs
    ) -> None:
        page.goto(open_ui_server.endpoint + "/ui/sessions?workflow_contains=GATED")
        before = page.locator("#live-list tr[data-session]").count()
        started = start_gated(open_ui_server)
        assert started.exit_code == 0, started.explain()
        attempt_id = str(started.json()["id"])
        try:
            rows = page.locator("#live-list tr[data-session]")
            # The list polls seldom while nothing on it runs, and at once when the tab
            # comes back: show the page again rather than wait for the slow poll.
            page.evaluate("() => document.dispatchEvent(new Event('visibilitychange'))")
            expect(rows).to_have_count(before + 1, timeout=LIVE_WAIT_MS)
            link = page.locator(f'#live-list a[href="/ui/attempts/{attempt_id}"]')
            expect(link).to_have_count(1)
        finally:
            (runs.gate_dir / "open").touch()
            wait_for_attempt(open_ui_server, attempt_id)

    def test_the_overview_lists_a_running_attempt_then_drops_it_when_it_ends(
        self, page: Any, open_ui_server: StandaloneProcess, runs: Runs, gated_attempt: str
    ) -> None:
        page.goto(open_ui_server.endpoint + "/ui/")
        running = page.locator("#running")
        link = running.locator(f'a[href="/ui/attempts/{gated_attempt}"]')
        expect(link).to_have_count(1, timeout=LIVE_WAIT_MS)
        expect(running.locator("td.duration")).to_contain_text("running for")
        (runs.gate_dir / "open").touch()
        expect(link).to_have_count(0, timeout=LIVE_WAIT_MS)

    def test_a_hidden_tab_fetches_nothing_and_catches_up_when_shown(
        self, page: Any, open_ui_server: StandaloneProcess, runs: Runs, gated_attempt: str
    ) -> None:
        # Given the attempts list with a running row, in a tab the browser says is hidden
        page.add_init_script(
            "Object.defineProperty(document, 'hidden', { get: () => window.__hidden === true });"
        )
        fetched: list[str] = []
        page.on("request", lambda request: fetched.append(request.url))
        page.goto(open_ui_server.endpoint + "/ui/attempts?project=Night-Shift")
        expect(_row(page, gated_attempt).locator("td.state-cell")).to_have_text("running")
        page.evaluate(SET_HIDDEN, True)
        fetched.clear()
        # When the attempt ends while the tab stays hidden for two polling periods
        (runs.gate_dir / "open").touch()
        wait_for_attempt(open_ui_server, gated_attempt)
        page.wait_for_timeout(7_000)
        # Then nothing was fetched, and the row still shows what it showed
        assert [url for url in fetched if "/live" in url] == []
        expect(_row(page, gated_attempt).locator("td.state-cell")).to_have_text("running")
        # And once the tab is shown, the list is fetched at once
        page.evaluate(SET_HIDDEN, False)
        expect(_row(page, gated_attempt).locator("td.state-cell")).to_have_text("success")

    def test_the_workflow_grid_follows_a_running_attempt_and_keeps_the_focused_cell(
        self, page: Any, open_ui_server: StandaloneProcess, runs: Runs, gated_attempt: str
    ) -> None:
        page.goto(open_ui_server.endpoint + "/ui/projects/Night-Shift/workflows/Gated_Load")
        cell = page.locator(f'#grid thead a.cell[href="/ui/attempts/{gated_attempt}"]')
        expect(cell).to_have_class(re.compile(r"\bcell-running\b"))
        cell.focus()
        (runs.gate_dir / "open").touch()
        expect(cell).to_have_class(re.compile(r"\bcell-success\b"), timeout=LIVE_WAIT_MS)
        expect(cell).to_be_focused()

    def test_the_project_page_follows_its_workflows_last_sessions(
        self, page: Any, open_ui_server: StandaloneProcess, runs: Runs, gated_attempt: str
    ) -> None:
        page.goto(open_ui_server.endpoint + "/ui/projects/Night-Shift")
        last = page.locator("#workflows").get_by_role("link", name="running")
        expect(last).to_have_attribute("href", f"/ui/attempts/{gated_attempt}")
        (runs.gate_dir / "open").touch()
        done = page.locator("#workflows").get_by_role("link", name="success")
        expect(done).to_have_attribute(
            "href", f"/ui/attempts/{gated_attempt}", timeout=LIVE_WAIT_MS
        )


class TestSearchAndFilters:
    def test_the_attempts_list_matches_part_of_a_project_name_in_any_case(
        self, page: Any, open_ui_server: StandaloneProcess, runs: Runs
    ) -> None:
        page.goto(open_ui_server.endpoint + "/ui/attempts")
        page.get_by_label("Project", exact=True).fill("AMPL")
        page.get_by_role("button", name="Filter").click()
        expect(page).to_have_url(re.compile(r"project_contains=AMPL"))
        rows = page.locator("#live-list tr[data-attempt]")
        expect(page.locator(f'#live-list tr[data-attempt="{runs.failed}"]')).to_have_count(1)
        expect(page.locator(f'#live-list tr[data-attempt="{runs.succeeded}"]')).to_have_count(1)
        expect(rows.filter(has_text="Night-Shift")).to_have_count(0)

    def test_the_sessions_list_matches_part_of_a_workflow_name_and_a_state(
        self, page: Any, open_ui_server: StandaloneProcess, runs: Runs
    ) -> None:
        page.goto(open_ui_server.endpoint + "/ui/sessions")
        page.get_by_label("Workflow", exact=True).fill("HANDLER")
        page.locator('form.filters select[name="state"]').select_option("error")
        page.get_by_role("button", name="Filter").click()
        rows = page.locator("#live-list tr[data-session]")
        expect(rows).to_have_count(1)
        expect(rows.first).to_contain_text("error_handler")
        page.locator('form.filters select[name="state"]').select_option("success")
        page.get_by_role("button", name="Filter").click()
        expect(page.locator("#live-list")).to_contain_text("No sessions match these filters")

    def test_a_session_time_range_keeps_the_sessions_inside_it(
        self, page: Any, open_ui_server: StandaloneProcess, runs: Runs
    ) -> None:
        base = open_ui_server.endpoint + "/ui/sessions?project=examples"
        ours = page.locator(
            f'#live-list a[href="/ui/attempts/{runs.failed}"], '
            f'#live-list a[href="/ui/attempts/{runs.succeeded}"]'
        )
        page.goto(base + "&from=2000-01-01T00:00:00Z&to=2999-01-01T00:00:00Z")
        expect(ours).to_have_count(2)
        page.goto(base + "&from=2000-01-01T00:00:00Z&to=2000-01-02T00:00:00Z")
        expect(page.locator("#live-list tr[data-session]")).to_have_count(0)
        page.goto(base + "&from=2000-01-02T00:00:00Z&to=2000-01-01T00:00:00Z")
        expect(page.get_by_role("alert")).to_contain_text("to: must be later than from")

    def test_the_projects_list_matches_part_of_a_name_in_any_case(
        self, page: Any, open_ui_server: StandaloneProcess, runs: Runs
    ) -> None:
        page.goto(open_ui_server.endpoint + "/ui/projects")
        page.get_by_label("Name").fill("shift")
        page.get_by_role("button", name="Filter").click()
        table = page.get_by_role("region", name="Projects")
        expect(table.get_by_role("link", name="Night-Shift")).to_have_count(1)
        expect(table.get_by_role("link", name="examples")).to_have_count(0)

    def test_the_header_search_goes_straight_to_an_attempt_by_id(
        self, page: Any, open_ui_server: StandaloneProcess, runs: Runs
    ) -> None:
        page.goto(open_ui_server.endpoint + "/ui/sessions")
        search = page.get_by_role("searchbox", name="Find a project, workflow, session or attempt")
        search.fill(f"#{runs.failed}")
        search.press("Enter")
        expect(page).to_have_url(f"{open_ui_server.endpoint}/ui/attempts/{runs.failed}")

    def test_the_header_search_goes_straight_to_the_only_match(
        self, page: Any, open_ui_server: StandaloneProcess, runs: Runs
    ) -> None:
        page.goto(open_ui_server.endpoint + "/ui/")
        search = page.get_by_role("searchbox", name="Find a project, workflow, session or attempt")
        search.fill("gated_l")
        search.press("Enter")
        expect(page).to_have_url(
            f"{open_ui_server.endpoint}/ui/projects/Night-Shift/workflows/Gated_Load"
        )

    def test_the_header_search_lists_matches_by_kind(
        self, page: Any, open_ui_server: StandaloneProcess, runs: Runs
    ) -> None:
        page.goto(open_ui_server.endpoint + "/ui/search?q=S")
        projects = page.get_by_role("region", name="Projects")
        expect(projects.get_by_role("link", name="examples")).to_have_count(1)
        expect(projects.get_by_role("link", name="Night-Shift")).to_have_count(1)
        workflows = page.get_by_role("region", name="Workflows")
        expect(workflows.get_by_role("link", name="sequence", exact=True)).to_have_count(1)
        expect(workflows.get_by_role("link", name="error_handler")).to_have_count(0)


class TestTimes:
    def test_the_zone_switch_changes_every_time_and_is_remembered(
        self, page: Any, open_ui_server: StandaloneProcess, runs: Runs, gated_attempt: str
    ) -> None:
        # Given an attempt of a workflow in Asia/Tokyo, its times shown in that zone
        page.goto(open_ui_server.endpoint + "/ui/attempts?project=Night-Shift")
        time = _row(page, gated_attempt).locator("time").first
        expect(time).to_have_text(re.compile(r"\+09:00$"))
        # When the viewer picks UTC
        page.get_by_label("Show times in").select_option("utc")
        # Then the times show in UTC, and still do after a reload
        expect(time).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ$"))
        page.reload()
        time = _row(page, gated_attempt).locator("time").first
        expect(time).to_have_text(re.compile(r"Z$"))
        expect(page.get_by_label("Show times in")).to_have_value("utc")
        # And the workflow's zone brings the server's text back
        page.get_by_label("Show times in").select_option("workflow")
        expect(time).to_have_text(re.compile(r"\+09:00$"))

    def test_times_a_page_redraws_follow_the_chosen_zone(
        self, page: Any, open_ui_server: StandaloneProcess, runs: Runs, gated_attempt: str
    ) -> None:
        # Given UTC chosen, and the page of a running attempt of a Tokyo workflow
        page.goto(open_ui_server.endpoint + "/ui/attempts")
        page.get_by_label("Show times in").select_option("utc")
        page.goto(f"{open_ui_server.endpoint}/ui/attempts/{gated_attempt}")
        facts = page.locator("#attempt-live dl.facts")
        expect(facts.locator("time").first).to_have_text(re.compile(r"Z$"))
        # When the attempt ends and the page redraws its live part with the end time
        (runs.gate_dir / "open").touch()
        finished = facts.locator("div", has=page.locator("dt", has_text="Finished")).locator("time")
        # Then the new times show in UTC too
        expect(finished).to_have_text(
            re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ$"), timeout=LIVE_WAIT_MS
        )
        expect(facts.locator("time").first).to_have_text(re.compile(r"Z$"))

    def test_the_browser_zone_shows_times_in_the_browsers_own_zone(
        self, browser: Any, open_ui_server: StandaloneProcess, runs: Runs
    ) -> None:
        context = browser.new_context(timezone_id="America/New_York")
        context.set_default_timeout(TIMEOUT_MS)
        try:
            page = context.new_page()
            page.goto(open_ui_server.endpoint + "/ui/attempts?project=examples")
            page.get_by_label("Show times in").select_option("local")
            time = _row(page, runs.failed).locator("time").first
            expect(time).to_have_text(re.compile(r"-0[45]:00$"))
            datetime_value = time.get_attribute("datetime")
            assert datetime_value is not None and datetime_value.endswith("Z")
        finally:
            context.close()

    def test_ended_attempts_show_how_long_they_took(
        self, page: Any, open_ui_server: StandaloneProcess, runs: Runs
    ) -> None:
        page.goto(open_ui_server.endpoint + "/ui/sessions?project=examples")
        for attempt_id in (runs.failed, runs.succeeded):
            row = page.locator(
                "#live-list tr[data-session]",
                has=page.locator(f'a[href="/ui/attempts/{attempt_id}"]'),
            )
            expect(row.locator("td.duration")).to_have_text(re.compile(r"^(\d+\.\ds|\d+m \d\ds)$"))


PAGES = (
    "/ui/",
    "/ui/sessions",
    "/ui/attempts",
    "/ui/projects",
    "/ui/projects/examples",
    "/ui/projects/examples/workflows/error_handler",
    "/ui/schedules",
    "/ui/search?q=e",
)


class TestSmallScreensAndDarkRooms:
    @pytest.mark.parametrize("path", PAGES)
    def test_a_page_fits_a_390_pixel_phone(
        self, browser: Any, open_ui_server: StandaloneProcess, runs: Runs, path: str
    ) -> None:
        context = browser.new_context(viewport=PHONE_VIEWPORT)
        context.set_default_timeout(TIMEOUT_MS)
        try:
            page = context.new_page()
            page.goto(open_ui_server.endpoint + path)
            width = page.evaluate("() => document.documentElement.scrollWidth")
            assert width <= PHONE_VIEWPORT["width"], f"{path} is {width} px wide"
        finally:
            context.close()

    def test_the_overview_shows_a_failures_error_on_a_phone(
        self, browser: Any, open_ui_server: StandaloneProcess, runs: Runs
    ) -> None:
        context = browser.new_context(viewport=PHONE_VIEWPORT)
        context.set_default_timeout(TIMEOUT_MS)
        try:
            page = context.new_page()
            page.goto(open_ui_server.endpoint + "/ui/")
            error = page.locator("#failures tr.failure td.error").first
            expect(error).to_contain_text("warehouse is read-only for maintenance")
            expect(error).to_be_in_viewport()
            box = error.bounding_box()
            assert box is not None and box["x"] >= 0
            assert box["x"] + box["width"] <= PHONE_VIEWPORT["width"]
        finally:
            context.close()

    @pytest.mark.parametrize("path", ("/ui/", "/ui/sessions", "/ui/projects/examples"))
    def test_a_page_is_dark_in_a_dark_colour_scheme(
        self, page: Any, open_ui_server: StandaloneProcess, runs: Runs, path: str
    ) -> None:
        page.emulate_media(color_scheme="dark")
        page.goto(open_ui_server.endpoint + path)
        assert _lightness(page, "body") < 0.2
        assert _lightness(page, "th") < 0.3
        assert _lightness(page, "body", "color") > 0.7

    @pytest.mark.parametrize("path", PAGES)
    def test_a_dark_page_has_no_serious_accessibility_violation(
        self, page: Any, open_ui_server: StandaloneProcess, runs: Runs, path: str
    ) -> None:
        page.emulate_media(color_scheme="dark")
        page.goto(open_ui_server.endpoint + path)
        violations = serious_violations(page)
        assert violations == [], f"{path} in the dark:\n{describe(violations)}"

    def test_a_page_is_light_in_a_light_colour_scheme(
        self, page: Any, open_ui_server: StandaloneProcess, runs: Runs
    ) -> None:
        page.emulate_media(color_scheme="light")
        page.goto(open_ui_server.endpoint + "/ui/")
        assert _lightness(page, "body") > 0.8


def _lightness(page: Any, selector: str, prop: str = "background-color") -> float:
    """The relative lightness (0 black, 1 white) of an element's colour ``prop``; for a
    transparent background, its document's."""
    value = page.evaluate(
        """([selector, prop]) => {
          let element = document.querySelector(selector);
          let colour = getComputedStyle(element)[prop === "color" ? "color" : "backgroundColor"];
          while (prop !== "color" && colour === "rgba(0, 0, 0, 0)" && element.parentElement) {
            element = element.parentElement;
            colour = getComputedStyle(element).backgroundColor;
          }
          if (colour === "rgba(0, 0, 0, 0)") {
            colour = getComputedStyle(document.documentElement).backgroundColor;
          }
          return colour;
        }""",
        [selector, prop],
    )
    numbers = [int(n) for n in re.findall(r"\d+", value)[:3]]
    return sum(numbers) / (3 * 255)
