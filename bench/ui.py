"""The web UI's pages on a 100,000-session store: server time per page, and in headless
Chromium the 2,000-task attempt page's first useful paint (its tree rows and its failed
task's log), its graph, and its log pane opening a 64 MiB log.

A throwaway database on TICKWORK_BENCH_DATABASE_URL (default: the local server) gets
four projects of five scheduled workflows, ``--sessions`` sessions spread over them with
their attempts and tasks (running, failed and retried, killed, succeeded), and one
failed attempt of 2,000 tasks in 40 groups whose failed task has a 64 MiB log
(bench/_ui_seed.py).

Server time: the API application (auth off) answers ``--requests`` requests of each page
in this process through Flask's test client, timed around each call: the overview, the
sessions list's first page and a page ``--depth`` pages deep (found by following its
"next" link), a workflow's grid and the 2,000-task attempt. Browser times: a real
``tickwork api`` serves the same database and Chromium (Playwright, /usr/bin/chromium)
opens the attempt page (see :func:`paint_times`): the first useful paint is when both the
tree's rows and the failed task's log (its last 64 KiB, read by range) are on screen, by
the page's performance marks; the graph time is ``performance.now()`` when the page's
script sets ``document.body.dataset.graphDrawn`` or puts the laid-out SVG into its
``#graph`` element; the log pane time is from a click on the failed task's name to its
log shown.

A page that does not exist yet is reported as null, with a note on stderr. The last
stdout line is one JSON object of figures; the database is dropped and the server
stopped however the run ends.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import time
from html import unescape
from pathlib import Path
from typing import Any

from _stores import percentile, throwaway_database
from _ui_seed import Seeded, seed
from api import BenchFailed, api_server, main_guarded
from flask.testing import FlaskClient

from tickwork.services.api.app import create_app
from tickwork.services.api.config import ApiConfig
from tickwork.shared.store.engine import create_store_engine

PAGES = ("overview", "sessions", "deep_page", "grid", "attempt")  # the figures' order
CHROMIUM = "/usr/bin/chromium"
GRAPH_TIMEOUT_MS = 30_000
TARGET_PAGE_P99_MS = 100.0
TARGET_GRAPH_MS = 2000.0
TARGET_PAINT_MS = 1000.0
TARGET_LOG_PANE_MS = 1000.0
NEXT_LINK = re.compile(
    r'<a\b[^>]*\brel="next"[^>]*\bhref="([^"]+)"|<a\b[^>]*\bhref="([^"]+)"[^>]*\brel="next"'
)

log = logging.getLogger("bench.ui")

# Records performance.now() when the attempt page's graph is drawn: when its script sets
# ``data-graph-drawn="true"`` on the body, or when the laid-out SVG is put into the page's
# ``#graph`` element (it is built whole, then inserted). An init script runs before the
# page's own scripts and is not subject to the page's CSP.
RECORD_GRAPH_DRAWN = """
const graphDrawn = () =>
  (document.body && document.body.dataset.graphDrawn === "true") ||
  document.querySelector("#graph svg") !== null;
new MutationObserver((changes, observer) => {
  if (graphDrawn()) {
    window.__tickworkGraphDrawnMs = performance.now();
    observer.disconnect();
  }
}).observe(document, {
  subtree: true, childList: true, attributes: true, attributeFilter: ["data-graph-drawn"]
});
"""

DRAWN_SELECTOR = 'body[data-graph-drawn="true"], #graph svg'
"""What appears when the graph is drawn (RECORD_GRAPH_DRAWN has then noted the time)."""


def page_paths(seeded: Seeded) -> dict[str, str]:
    """The pages timed, by figure name (the deep page is found by following links)."""
    grid = seeded.workflows[0]
    return {
        "overview": "/ui/",
        "sessions": "/ui/sessions",
        "grid": f"/ui/projects/{grid.project}/workflows/{grid.name}",
        "attempt": f"/ui/attempts/{seeded.big_attempt_id}",
    }


def first_answer(client: FlaskClient, name: str, path: str) -> str | None:
    """The page's HTML, or None (said on stderr) when it is missing or answers wrongly."""
    response = client.get(path)
    if response.status_code == 200:
        return response.get_data(as_text=True)
    if response.status_code == 404:
        log.warning("page missing name=%s path=%s: reported as null", name, path)
    else:
        body = response.get_data(as_text=True)[:300]
        log.error(
            "page failed name=%s path=%s status=%d body=%r", name, path, response.status_code, body
        )
    return None


def time_page(
    client: FlaskClient, path: str, requests: int, accepted: tuple[int, ...] = (200,)
) -> list[float]:
    """Milliseconds of ``requests`` answers to GET ``path``, after three not counted; an
    answer whose status is not ``accepted`` stops the run."""
    for _ in range(3):
        client.get(path).get_data()
    timings = []
    for _ in range(requests):
        started = time.perf_counter()
        response = client.get(path)
        response.get_data()
        timings.append(1000 * (time.perf_counter() - started))
        if response.status_code not in accepted:
            raise BenchFailed(f"GET {path} answered {response.status_code}")
    return timings


def next_link(html: str) -> str | None:
    """The href of the page's ``rel="next"`` link, if it has one."""
    match = NEXT_LINK.search(html)
    return unescape(match.group(1) or match.group(2)) if match else None


def find_deep_page(client: FlaskClient, first_html: str, depth: int) -> str | None:
    """The path ``depth`` "next" links after the first sessions page; None if the pages
    end sooner or have no such link."""
    html, path = first_html, None
    for followed in range(depth):
        path = next_link(html)
        if path is None:
            log.warning(
                "sessions pages end after page=%d: deep page reported as null", followed + 1
            )
            return None
        response = client.get(path)
        if response.status_code != 200:
            log.error("deep page failed path=%s status=%d", path, response.status_code)
            return None
        html = response.get_data(as_text=True)
    return path


def server_times(
    url: str, seeded: Seeded, args: argparse.Namespace
) -> dict[str, list[float] | None]:
    """Each page's answer times in this process (Flask's test client, auth off)."""
    engine = create_store_engine(url)
    config = ApiConfig(database_url=url, auth_enabled=False, rate_limit_per_second=0)
    client = create_app(config, engine).test_client()
    found: dict[str, list[float] | None] = {}
    try:
        for name, path in page_paths(seeded).items():
            html = first_answer(client, name, path)
            found[name] = None if html is None else time_page(client, path, args.requests)
            if name == "sessions":
                deep = None if html is None else find_deep_page(client, html, args.depth)
                found["deep_page"] = (
                    None if deep is None else time_page(client, deep, args.requests)
                )
                log.info("deep page path=%s", deep)
    finally:
        engine.dispose()
    return found


def paint_times(base_url: str, seeded: Seeded, runs: int) -> dict[str, list[float]]:
    """In ``runs`` fresh loads of the attempt page in headless Chromium, milliseconds
    from navigation start until: its graph was drawn (``graph``); its tree rows and its
    failed task's log were on screen (``useful_paint``: the later of the page's
    ``tickwork:tree-shown`` and ``tickwork:log-shown`` performance marks); and, after
    closing the pane, from clicking the failed task's name to its 64 MiB log shown
    (``log_pane``: ``tickwork:log-open`` to ``tickwork:log-shown``)."""
    from playwright.sync_api import sync_playwright

    path = page_paths(seeded)["attempt"]
    found: dict[str, list[float]] = {"graph": [], "useful_paint": [], "log_pane": []}
    loaded = '#log-pane[data-loaded="true"]'
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            for _ in range(runs):
                context = browser.new_context(viewport={"width": 1280, "height": 800})
                page = context.new_page()
                page.add_init_script(RECORD_GRAPH_DRAWN)
                page.goto(base_url + path, wait_until="commit", timeout=GRAPH_TIMEOUT_MS)
                # Selectors, not functions: the page's CSP forbids the eval that
                # wait_for_function needs.
                page.wait_for_selector(loaded, state="attached", timeout=GRAPH_TIMEOUT_MS)
                page.wait_for_selector(DRAWN_SELECTOR, state="attached", timeout=GRAPH_TIMEOUT_MS)
                _check_log_shown(page)
                found["graph"].append(float(page.evaluate("window.__tickworkGraphDrawnMs")))
                found["useful_paint"].append(float(page.evaluate(USEFUL_PAINT_MS)))
                page.locator("#log-pane .pane-close").click()
                link = f'#task-tree a.open-log[data-task-id="{seeded.big_failed_task_id}"]'
                page.locator(link).click()
                page.wait_for_selector(loaded, state="attached", timeout=GRAPH_TIMEOUT_MS)
                _check_log_shown(page)
                found["log_pane"].append(float(page.evaluate(LOG_PANE_MS)))
                context.close()
        finally:
            browser.close()
    return found


USEFUL_PAINT_MS = """Math.max(
  performance.getEntriesByName("tickwork:tree-shown")[0].startTime,
  performance.getEntriesByName("tickwork:log-shown")[0].startTime)"""
LOG_PANE_MS = """(() => {
  const opened = performance.getEntriesByName("tickwork:log-open");
  const shown = performance.getEntriesByName("tickwork:log-shown");
  return shown[shown.length - 1].startTime - opened[opened.length - 1].startTime;
})()"""
LOG_END = "table missing: exit code 3"


def _check_log_shown(page: Any) -> None:
    """BenchFailed unless the pane shows the end of the failed task's log."""
    text = page.locator("#log-pane pre.log-view").inner_text()
    if not text.rstrip().endswith(LOG_END):
        raise BenchFailed(f"the log pane shows {text[-200:]!r}, not the log's end")


def browser_time(
    url: str, seeded: Seeded, args: argparse.Namespace, work_dir: Path
) -> dict[str, list[float]] | None:
    """The attempt page's times in Chromium against a real ``tickwork api``
    (:func:`paint_times`); None (said on stderr) without Chromium, or when the page
    never shows what is measured."""
    if not Path(CHROMIUM).exists():
        log.warning("no %s (Debian's chromium package): browser times reported as null", CHROMIUM)
        return None
    with (
        (work_dir / "api.log").open("wb") as server_log,
        api_server(url, 2, server_log, {"TICKWORK_API_AUTH": "off"}) as base_url,
    ):
        try:
            return paint_times(base_url, seeded, args.graph_runs)
        except Exception as exc:  # Playwright's timeout, or a page that is not there yet
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            log.warning("attempt page not measured error=%s: reported as null", first)
            return None


def run_all(args: argparse.Namespace, server_url: str, work_dir: Path) -> dict[str, Any]:
    """Seed, then time the pages in process and the graph in Chromium; their figures."""
    with throwaway_database(server_url) as url:
        engine = create_store_engine(url)
        started = time.perf_counter()
        seeded = seed(engine, args.sessions)
        engine.dispose()
        seed_seconds = time.perf_counter() - started
        log.info(
            "seeded sessions=%d big_tasks=%d seconds=%.1f",
            seeded.sessions,
            seeded.big_tasks,
            seed_seconds,
        )
        pages = server_times(url, seeded, args)
        if pages["attempt"] is None:
            log.warning("no attempt page: browser times reported as null")
            browser = None
        else:
            browser = browser_time(url, seeded, args, work_dir)
    return figures(pages, browser, seeded, seed_seconds)


def figures(
    pages: dict[str, list[float] | None],
    browser: dict[str, list[float]] | None,
    seeded: Seeded,
    seed_seconds: float,
) -> dict[str, Any]:
    """The headline p99s and browser medians first, then p50s, maxima and the set-up."""

    def ms(values: list[float] | None, fraction: float) -> float | None:
        return None if not values else round(percentile(values, fraction), 2)

    def times(name: str) -> list[float] | None:
        return None if browser is None else browser[name]

    out: dict[str, Any] = {f"{name}_p99_ms": ms(pages.get(name), 0.99) for name in PAGES}
    out["useful_paint_2000_ms"] = ms(times("useful_paint"), 0.5)
    out["log_pane_64mib_ms"] = ms(times("log_pane"), 0.5)
    out["graph_2000_ms"] = ms(times("graph"), 0.5)
    out |= {f"{name}_p50_ms": ms(pages.get(name), 0.5) for name in PAGES}
    out["useful_paint_2000_max_ms"] = ms(times("useful_paint"), 1.0)
    out["log_pane_64mib_max_ms"] = ms(times("log_pane"), 1.0)
    out["graph_2000_max_ms"] = ms(times("graph"), 1.0)
    browser_figures = ("useful_paint_2000_ms", "log_pane_64mib_ms", "graph_2000_ms")
    measured = [out[f"{name}_p99_ms"] for name in PAGES] + [out[n] for n in browser_figures]
    out |= {
        "sessions_seeded": seeded.sessions,
        "graph_tasks": seeded.big_tasks,
        "log_bytes": seeded.big_log_bytes,
        "seed_seconds": round(seed_seconds, 2),
        "meets_targets": None not in measured
        and all(out[f"{name}_p99_ms"] < TARGET_PAGE_P99_MS for name in PAGES)
        and out["useful_paint_2000_ms"] < TARGET_PAINT_MS
        and out["log_pane_64mib_ms"] < TARGET_LOG_PANE_MS
        and out["graph_2000_ms"] < TARGET_GRAPH_MS,
    }
    return out


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100_000, help="sessions to seed")
    parser.add_argument("--requests", type=int, default=50, help="timed requests per page")
    parser.add_argument("--depth", type=int, default=100, help="pages to the deep page")
    parser.add_argument("--graph-runs", type=int, default=5, help="page loads in Chromium")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()
    if args.sessions < 1000 or args.requests < 1 or args.depth < 1 or args.graph_runs < 1:
        parser.error("--sessions must be at least 1000; --requests, --depth, --graph-runs >= 1")
    return args


def main() -> int:
    return main_guarded(parse_args(), run_all, "ui")


if __name__ == "__main__":
    sys.exit(main())
