"""A real browser for the UI's specs: Debian's Chromium driven by Playwright.

Playwright cannot download its own browsers here, so it launches the system's
(``TICKWORK_TEST_CHROMIUM``, else ``chromium`` on PATH). Without one the UI specs are
skipped, except under CI (``CI=true``), where a missing browser fails the run.
"""

from __future__ import annotations

import os
import shutil

BROWSER_PACKAGE = "chromium"
"""The Debian package that provides the browser (``apt-get install chromium``)."""


def chromium_path() -> str | None:
    """The Chromium executable to launch, or None if this machine has none."""
    named = os.environ.get("TICKWORK_TEST_CHROMIUM")
    if named:
        return named if os.access(named, os.X_OK) else None
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


def browser_required() -> bool:
    """Whether a missing browser fails the run instead of skipping the UI specs (CI)."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")
