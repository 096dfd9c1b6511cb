"""Accessibility checks in a real browser: the vendored axe-core (tests/ui/vendor/axe-core/)
run on a Playwright page.

axe's source is evaluated through the browser's DevTools connection rather than added as
a ``<script>`` element, so it runs on pages whose Content-Security-Policy forbids inline
scripts, and the page is checked as it is served.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

AXE_SCRIPT = Path(__file__).resolve().parents[1] / "ui" / "vendor" / "axe-core" / "axe.min.js"
BLOCKING_IMPACTS = ("serious", "critical")
"""The impacts a page may not have: axe's two highest (minor and moderate ones are reported
by axe but do not fail a spec)."""


def serious_violations(page: Any) -> list[dict[str, Any]]:
    """The serious and critical axe-core violations on ``page`` as it is now."""
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.evaluate(AXE_SCRIPT.read_text(encoding="utf-8"))
    results: dict[str, Any] = page.evaluate(
        "() => window.axe.run(document, {resultTypes: ['violations']})"
    )
    return [v for v in results["violations"] if v.get("impact") in BLOCKING_IMPACTS]


def describe(violations: list[dict[str, Any]]) -> str:
    """One line per violation and per element it names, for an assertion's message."""
    lines = []
    for violation in violations:
        lines.append(f"{violation['impact']}: {violation['id']}: {violation['help']}")
        lines += [f"    {node['html'][:160]}" for node in violation["nodes"][:5]]
    return "\n".join(lines)
