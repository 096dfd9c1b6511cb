"""The documented tables of settings (docs/settings.md), rendered from their declarations.

``python -m tests.support.settings_docs > docs/settings.md`` writes the page;
tests/test_settings_docs.py holds the file to it.
"""

from __future__ import annotations

from collections.abc import Iterable

from tickwork.services.agent.config import AGENT_SETTINGS
from tickwork.services.api.config import API_SETTINGS
from tickwork.services.executor.config import EXECUTOR_SETTINGS
from tickwork.services.scheduler.config import SCHEDULER_SETTINGS
from tickwork.shared.config import EMBEDDED_SETTINGS, Setting

COMMAND_SETTINGS: dict[str, tuple[Setting, ...]] = {
    "tickwork run": EMBEDDED_SETTINGS,
    "tickwork api": API_SETTINGS,
    "tickwork scheduler": SCHEDULER_SETTINGS,
    "tickwork executor": EXECUTOR_SETTINGS,
    "tickwork agent": AGENT_SETTINGS,
}
"""Each command whose settings are declared in a table, with its table."""

WITH_FLAGS = frozenset({"tickwork scheduler", "tickwork executor", "tickwork agent"})
"""The commands whose options are derived from their tables (services/compose/serve.py)."""

HEADER = """# Settings

Every variable the commands below read, with its command-line flag, its default and its
meaning. This page is rendered from the settings' declarations
(`python -m tests.support.settings_docs > docs/settings.md`); a spec holds it to them.
A flag given on the command line wins over its variable. Each command validates its
settings when it starts and names the variable (or the flag) of a bad value.
"""


def settings_table(settings: Iterable[Setting], *, flags: bool) -> str:
    """The Markdown table of ``settings``: variable, flag (when ``flags``), default, meaning."""
    rows = ["| variable | flag | default | meaning |", "|---|---|---|---|"]
    for setting in settings:
        flag = f"`{setting.flag}`" if flags and setting.flag else ""
        shown = setting.shown_default or (f"`{setting.default}`" if setting.default else "")
        meaning = setting.doc.replace("|", "\\|").replace("<", "\\<")
        rows.append(f"| `{setting.name}` | {flag} | {shown} | {meaning} |")
    return "\n".join(rows)


def settings_page() -> str:
    """docs/settings.md: a section and a table for each command."""
    sections = [HEADER]
    for command, settings in COMMAND_SETTINGS.items():
        table = settings_table(settings, flags=command in WITH_FLAGS)
        sections.append(f"## {command}\n\n{table}\n")
    return "\n".join(sections)


def declared_names() -> set[str]:
    """Every variable some command's table declares."""
    return {s.name for settings in COMMAND_SETTINGS.values() for s in settings}


if __name__ == "__main__":
    print(settings_page(), end="")
