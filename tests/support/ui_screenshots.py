"""Screenshots of the web UI for the README, taken from a real run (``make ui-screenshots``).

A fresh standalone in a temporary directory (as ``make run`` starts it: the examples
pushed) runs a few of the examples, one of which fails on purpose (``retry_notify``); then
Debian's Chromium, driven by Playwright at 1280 by 800 pixels, saves the overview, the
failed attempt's page (its failed task's log open in the pane beside the tree), the same
page in the dark colour scheme, and a workflow's page into docs/images/. A page that does
not answer 200 stops the script before any image is written.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.e2e._standalone import StandaloneProcess, running_standalone, wait_for_attempt
from tests.support.browser import BROWSER_PACKAGE, chromium_path
from tests.support.documented_commands import REPO_ROOT

IMAGES = REPO_ROOT / "docs" / "images"
VIEWPORT = {"width": 1280, "height": 800}
TIMEOUT_MS = 15_000
SETTLE_MS = 1_000
"""How long a page's scripts get to draw (the task graph, times) before its picture."""
RUNS = (
    ("hello", "2026-11-28"),
    ("hello", "2026-11-29"),
    ("hello", "2026-11-30"),
    ("sequence", "now"),
    ("retry_notify", "now"),
)
"""The examples started, in order, with their session times; ``retry_notify`` fails on
purpose. Three of hello's sessions fill its workflow page's grid."""
FAILING = "retry_notify"
WORKFLOW = "hello"


def run_examples(standalone: StandaloneProcess) -> dict[str, str]:
    """Start each of :data:`RUNS` and wait for it to end; the latest attempt id by workflow."""
    attempts = {}
    for workflow, session in RUNS:
        started = standalone.tickwork("start", "examples", workflow, "--session", session, "--json")
        if started.exit_code != 0:
            raise SystemExit(started.explain())
        attempt_id = str(started.json()["id"])
        wait_for_attempt(standalone, attempt_id, timeout_seconds=60.0)
        attempts[workflow] = attempt_id
    return attempts


@contextmanager
def chromium_page(color_scheme: str = "light") -> Iterator[Any]:
    """A page of a headless Chromium at :data:`VIEWPORT` in ``color_scheme``."""
    executable = chromium_path()
    if executable is None:
        raise SystemExit(f"no Chromium: install Debian's {BROWSER_PACKAGE} package")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        try:
            context = browser.new_context(viewport=VIEWPORT, color_scheme=color_scheme)
            context.set_default_timeout(TIMEOUT_MS)
            yield context.new_page()
        finally:
            browser.close()


def picture(page: Any, url: str) -> bytes:
    """A PNG of ``url`` as a user first sees it; stops the script unless it answers 200."""
    response = page.goto(url)
    if response is None or response.status != 200:
        raise SystemExit(f"{url} answered {response.status if response else 'nothing'}")
    page.wait_for_load_state("load")
    page.wait_for_timeout(SETTLE_MS)
    image: bytes = page.screenshot()
    return image


def take(standalone: StandaloneProcess) -> dict[str, bytes]:
    """The README's pictures of the UI, by file name."""
    attempts = run_examples(standalone)
    base = standalone.endpoint + "/ui"
    pages = {
        "ui-overview.png": f"{base}/",
        "ui-attempt.png": f"{base}/attempts/{attempts[FAILING]}",
        "ui-workflow.png": f"{base}/projects/examples/workflows/{WORKFLOW}",
    }
    with chromium_page() as page:
        images = {name: picture(page, url) for name, url in pages.items()}
    with chromium_page("dark") as page:
        images["ui-attempt-dark.png"] = picture(page, pages["ui-attempt.png"])
    return images


def main() -> int:
    """Take the pictures from a fresh standalone and write them into docs/images/."""
    with tempfile.TemporaryDirectory(prefix="tickwork-screenshots-") as tmp:
        project = Path(tmp) / "examples"
        shutil.copytree(REPO_ROOT / "examples", project, ignore=shutil.ignore_patterns(".tickwork"))
        with running_standalone(Path(tmp) / "state", "--project", str(project)) as standalone:
            images = take(standalone)
    IMAGES.mkdir(parents=True, exist_ok=True)
    for name, image in images.items():
        (IMAGES / name).write_bytes(image)
        print(f"{(IMAGES / name).relative_to(REPO_ROOT)}: {len(image)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
