"""Pools in a real browser: a task of a pool no one has set shows on its attempt page as
waiting for that pool and on the Pools page (reached from the menu) with its slots
missing; an admin's bad value is shown beside its field, a good one lets the task run,
and the pool is deleted with its button; a read token sees the pools and no form."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.e2e._standalone import StandaloneProcess, wait_for_attempt
from tests.ui.conftest import ADMIN_TOKEN, READ_TOKEN, sign_in

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

POOL = "ui-reports"
REPORT = f"timezone: UTC\n_pool: {POOL}\n+report:\n  echo>: reporting\n"


@pytest.fixture(scope="module")
def waiting_attempt(
    ui_server: StandaloneProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """Project ``pools`` pushed and an attempt of it whose task waits for pool ``POOL``."""
    project: Path = tmp_path_factory.mktemp("pools-project")
    (project / "report.dig").write_text(REPORT, encoding="utf-8")
    pushed = ui_server.tickwork("push", str(project), "--project", "pools")
    assert pushed.exit_code == 0, pushed.explain()
    started = ui_server.tickwork("start", "pools", "report", "--json")
    assert started.exit_code == 0, started.explain()
    yield str(started.json()["id"])


def pool_row(page: Any) -> Any:
    return page.locator("table.pools tbody tr", has_text=POOL)


def test_an_admin_sees_the_wait_and_sets_then_deletes_the_pool(
    page: Any, ui_server: StandaloneProcess, waiting_attempt: str
) -> None:
    sign_in(page, ui_server, ADMIN_TOKEN)
    # Given a task waiting for a pool no one has set
    page.goto(f"{ui_server.endpoint}/ui/attempts/{waiting_attempt}")
    expect(page.locator("#task-tree")).to_contain_text(f"waiting for pool {POOL}")

    # Then the Pools page lists its pool with its slots missing
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Pools").click()
    expect(page.get_by_role("heading", name="Pools", exact=True)).to_be_visible()
    expect(pool_row(page).locator("td").nth(1)).to_have_text("missing")
    expect(pool_row(page).locator("td").nth(3)).to_have_text("1")

    # When the admin gives it slots below zero, the field says why and nothing changes
    page.get_by_label("Name").fill(POOL)
    page.get_by_label("Slots").fill("-2")
    page.get_by_role("button", name="Set pool").click()
    expect(page.locator("#pool-slots-error")).to_contain_text("greater than or equal to 0")
    expect(page.get_by_label("Name")).to_have_value(POOL)
    assert ui_server.get(f"/api/pools/{POOL}")["slots"] is None

    # When it gets a slot, the page says so and the task runs
    page.get_by_label("Slots").fill("1")
    page.get_by_label("Description").fill("the reporting database")
    page.get_by_role("button", name="Set pool").click()
    expect(page.get_by_role("status")).to_contain_text(f"Created pool {POOL}: 1 slots")
    expect(pool_row(page)).to_contain_text("the reporting database")
    assert wait_for_attempt(ui_server, waiting_attempt)["state"] == "success"
    page.reload()
    expect(pool_row(page).locator("td").nth(3)).to_have_text("0")  # none waiting

    # Then its button deletes it
    page.get_by_role("button", name=f"Delete pool {POOL}").click()
    expect(page.get_by_role("status")).to_contain_text(f"Deleted pool {POOL}")
    expect(pool_row(page)).to_have_count(0)
    assert ui_server.get("/api/pools")["items"] == []


def test_a_read_token_sees_the_pools_and_no_form(
    page: Any, ui_server: StandaloneProcess, waiting_attempt: str
) -> None:
    sign_in(page, ui_server, READ_TOKEN)
    page.goto(f"{ui_server.endpoint}/ui/pools")
    expect(page.get_by_role("heading", name="Pools", exact=True)).to_be_visible()
    expect(page.get_by_role("button", name="Set pool")).to_have_count(0)
    expect(page.get_by_role("button", name="Delete")).to_have_count(0)
