"""The documented settings are the declared ones: docs/settings.md is rendered from the
settings' tables, every declared variable is documented, and every ``TICKWORK_*``
variable the documentation names is declared or is one of a short list that is not a
server setting (a task's environment, the client's, the test suite's)."""

from __future__ import annotations

import re

from tests.support.documented_commands import REPO_ROOT, documentation_files
from tests.support.settings_docs import declared_names, settings_page

SETTINGS_PAGE = REPO_ROOT / "docs" / "settings.md"
VARIABLE = re.compile(r"\bTICKWORK_[A-Z0-9]+(?:_[A-Z0-9]+)*\b")

NOT_IN_A_TABLE = {
    # what a task's process finds in its environment
    "TICKWORK_ATTEMPT_ID": "a task's environment",
    "TICKWORK_TASK_ID": "a task's environment",
    "TICKWORK_LEASE_TOKEN": "a task's environment",
    # the client commands' connection and output (services/cli/client.py)
    "TICKWORK_ENDPOINT": "the client's",
    "TICKWORK_API_TOKEN": "the client's",
    "TICKWORK_CONFIG": "the client's",
    "TICKWORK_OUTPUT": "the client's",
    # the test suite's
    "TICKWORK_TEST_DATABASE_URL": "the test suite's",
    "TICKWORK_TEST_REDIS_URL": "the test suite's",
    "TICKWORK_TEST_CHROMIUM": "the test suite's",
    "TICKWORK_DIGDAG_EXAMPLES": "the test suite's (a Digdag checkout's examples)",
    # options of `tickwork api`, `standalone` and `dev` with their own click declarations
    "TICKWORK_API_BIND": "tickwork api's server options",
    "TICKWORK_API_WORKERS": "tickwork api's server options",
    "TICKWORK_API_CONNECTIONS": "tickwork api's server options",
    "TICKWORK_API_HEADER_TIMEOUT": "tickwork api's server options",
    "TICKWORK_API_BODY_TIMEOUT": "tickwork api's server options",
    "TICKWORK_API_GRACEFUL_TIMEOUT": "tickwork api's server options",
    "TICKWORK_DEV_DATABASE_URL": "tickwork dev's",
    "TICKWORK_LOG_FORMAT": "tickwork dev's",
    # named only to say it is no longer read
    "TICKWORK_LOG_DIR": "gone: task logs live in the store",
}


def documented_names() -> dict[str, str]:
    """Every TICKWORK_* variable the documentation names, with the first page naming it."""
    names: dict[str, str] = {}
    for page in documentation_files():
        for name in VARIABLE.findall(page.read_text(encoding="utf-8")):
            names.setdefault(name, str(page.relative_to(REPO_ROOT)))
    return names


def test_the_settings_page_is_the_one_the_declarations_render() -> None:
    assert SETTINGS_PAGE.read_text(encoding="utf-8") == settings_page(), (
        "docs/settings.md differs from the declarations; run "
        "`python -m tests.support.settings_docs > docs/settings.md`"
    )


def test_every_declared_variable_is_documented() -> None:
    assert declared_names() - set(documented_names()) == set()


def test_every_documented_variable_is_declared_or_named_as_no_server_setting() -> None:
    undeclared = {
        name: page
        for name, page in documented_names().items()
        if name not in declared_names() and name not in NOT_IN_A_TABLE
    }
    assert undeclared == {}


def test_a_variable_named_as_no_server_setting_is_not_declared_too() -> None:
    assert declared_names() & set(NOT_IN_A_TABLE) == set()
