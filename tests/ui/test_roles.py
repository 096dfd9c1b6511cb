"""What each role may do in a real browser: a read token sees every page and no button
that acts, and the server refuses its POST anyway; an admin token sees the buttons."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.e2e._standalone import StandaloneProcess, wait_for_attempt
from tests.ui.conftest import ADMIN_TOKEN, READ_TOKEN, sign_in

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

WORKFLOWS = {
    "nightly.dig": 'timezone: UTC\nschedule:\n  daily>: "00:00:00"\n+note:\n  echo>: night\n',
    "fails.dig": "timezone: UTC\n+boom:\n  sh>: exit 3\n",
}
ACTION_BUTTONS = ("Kill", "Retry failed", "Retry all", "Retry from task")


@pytest.fixture(scope="module")
def failed_attempt(
    ui_server: StandaloneProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """Project ``roles`` pushed and one failed attempt of it (started with the admin token)."""
    project: Path = tmp_path_factory.mktemp("roles-project")
    for name, text in WORKFLOWS.items():
        (project / name).write_text(text, encoding="utf-8")
    pushed = ui_server.tickwork("push", str(project), "--project", "roles")
    assert pushed.exit_code == 0, pushed.explain()
    started = ui_server.tickwork("start", "roles", "fails", "--json")
    assert started.exit_code == 0, started.explain()
    attempt_id = str(started.json()["id"])
    assert wait_for_attempt(ui_server, attempt_id)["state"] == "error"
    yield attempt_id


def test_a_read_token_sees_no_action_and_its_forged_post_is_refused(
    page: Any, ui_server: StandaloneProcess, failed_attempt: str
) -> None:
    sign_in(page, ui_server, READ_TOKEN)
    page.goto(f"{ui_server.endpoint}/ui/attempts/{failed_attempt}")
    expect(page.get_by_text("failed +fails+boom")).to_be_visible()
    for name in ACTION_BUTTONS:
        expect(page.get_by_role("button", name=name, exact=True)).to_have_count(0)
    page.goto(f"{ui_server.endpoint}/ui/schedules?project=roles")
    page.get_by_role("link", name="nightly").click()
    expect(page.get_by_role("button", name="Pause")).to_have_count(0)

    # The page's own CSRF token (the sign-out form's) on a POST the page does not offer.
    token = page.locator("input[name=csrf_token]").first.get_attribute("value")
    answer = page.request.post(
        f"{ui_server.endpoint}/ui/attempts/{failed_attempt}/retry",
        form={"csrf_token": token, "mode": "all"},
        max_redirects=0,
    )
    assert answer.status == 403
    assert ui_server.get("/api/attempts?project=roles")["items"][0]["id"] == failed_attempt


def test_an_admin_token_sees_the_actions(
    page: Any, ui_server: StandaloneProcess, failed_attempt: str
) -> None:
    sign_in(page, ui_server, ADMIN_TOKEN)
    page.goto(f"{ui_server.endpoint}/ui/attempts/{failed_attempt}")
    expect(page.get_by_role("button", name="Retry failed", exact=True)).to_be_visible()
