"""A 2,000-task attempt in a real browser is as usable as a small one: its failed task's
log opens at once beside the tree, tasks filter by state and by name across the whole
tree, the first failure is one click away, a folded group hides its tasks in the tree and
the graph together, any task's log opens from its row, and the values a task stored show
with the project's secrets masked.

The attempt is seeded once for the module through the store (the standalone's SQLite
file): 40 groups of 50 tasks, one task failed with a coloured log, the rest of its group
and the groups before it succeeded, the groups after it canceled."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect
from sqlalchemy import Connection, select, update

from tests.e2e._standalone import StandaloneProcess, running_standalone
from tests.support.files import write_under
from tickwork.services.executor.materialize import Placement, materialize_children
from tickwork.shared.store.engine import create_store_engine
from tickwork.shared.store.logs import LogChunk, write_log_chunks
from tickwork.shared.store.projects import load_workflow_definition
from tickwork.shared.store.starts import start_attempt
from tickwork.shared.store.tables import attempts, task_logs, tasks

pytestmark = [pytest.mark.slow]

GROUPS = 40
STEPS = 50
FAILED_STAGE = 7
FAILED_STEP = 20
FAILED = f"+big+stage{FAILED_STAGE:02d}+step{FAILED_STEP:03d}"
SECRET = "hunter2-very-secret"
LOG = (
    "".join(f"loading batch {n:05d}\n" for n in range(5000))
    + "\x1b[2K\x1b]0;window title\x07progress done\n"
    + "\x1b[31mERROR\x1b[0m table missing\n"
)
"""About 100 KiB: more than the pane reads at first (its last 64 KiB)."""


def big_workflow() -> str:
    """40 groups run one after another, each of 50 tasks in a chain."""
    lines = []
    for group in range(GROUPS):
        lines.append(f"+stage{group:02d}:")
        for step in range(STEPS):
            lines += [f"  +step{step:03d}:", f"    sh>: echo {group} {step}"]
    return "\n".join(lines) + "\n"


def _stage(full_name: str) -> int:
    return int(full_name.split("+stage")[1][:2]) if "+stage" in full_name else -1


def _state_of(full_name: str, is_group: bool) -> str:
    """What the seeded attempt did with a task: the failed one, its groups in error."""
    stage = _stage(full_name)
    if full_name == "+big" or (is_group and stage == FAILED_STAGE) or full_name == FAILED:
        return "error"
    if stage < FAILED_STAGE or (stage == FAILED_STAGE and full_name < FAILED):
        return "success"
    return "canceled"


def seed_failed_attempt(conn: Connection, now: datetime) -> int:
    """Start ``big`` through the store, materialise its 2,000 tasks as the executor does,
    and end it in error as a run would have; the attempt's id."""
    started = start_attempt(
        conn,
        project="big",
        workflow="big",
        session_time=now - timedelta(hours=1),
        params={},
        idempotency_key=None,
        now=now,
    )
    attempt_id = started.attempt_id
    definition_id = conn.execute(
        select(attempts.c.workflow_definition_id).where(attempts.c.id == attempt_id)
    ).scalar_one()
    definition = load_workflow_definition(conn, int(definition_id))
    placement = Placement(attempt_id, None, "", None, False)
    materialize_children(conn, placement, [definition.root], [], now)
    rows = conn.execute(
        select(tasks.c.id, tasks.c.full_name, tasks.c.is_group).where(
            tasks.c.attempt_id == attempt_id
        )
    ).all()
    for task_id, full_name, is_group in rows:
        state = _state_of(full_name, bool(is_group))
        values: dict[str, Any] = {"state": state}
        if state != "canceled":
            values |= {"started_at": now, "finished_at": now + timedelta(seconds=5)}
        if full_name == FAILED:
            values |= {
                "error": {"message": "exit code 3: table missing"},
                "result": {"store": {"api_key": SECRET, "rows": 200}},
                "lease_token": 1,
            }
            conn.execute(
                task_logs.insert(),
                {
                    "task_id": task_id,
                    "attempt_id": attempt_id,
                    "lease_token": 1,
                    "path": f"{attempt_id}/step.{task_id}.1.log",
                    "size_bytes": len(LOG.encode()),
                    "created_at": now,
                    "ended_at": now,
                },
            )
            write_log_chunks(conn, [LogChunk(task_id, 1, 0, LOG.encode())])
        conn.execute(update(tasks).where(tasks.c.id == task_id).values(**values))
    conn.execute(
        update(attempts)
        .where(attempts.c.id == attempt_id)
        .values(state="error", finished_at=now + timedelta(minutes=1))
    )
    return attempt_id


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StandaloneProcess, int]]:
    """A standalone holding the failed 2,000-task attempt of project ``big``, whose
    secret ``api_key`` the failed task stored in clear; the server and the attempt's id."""
    state_dir: Path = tmp_path_factory.mktemp("big") / "state"
    environ = {"TICKWORK_SECRET_KEY": "a passphrase of more than sixteen characters"}
    with running_standalone(state_dir, environ=environ) as server:
        directory = tmp_path_factory.mktemp("big-project")
        write_under(directory, "big.dig", textwrap.dedent(big_workflow()))
        pushed = server.tickwork("push", str(directory), "--project", "big")
        assert pushed.exit_code == 0, pushed.explain()
        secret = httpx.put(
            server.endpoint + "/api/projects/big/secrets/api_key",
            json={"value": SECRET},
            timeout=10.0,
        )
        assert secret.status_code in (200, 201), secret.text
        engine = create_store_engine(f"sqlite:///{state_dir / 'tickwork.db'}")
        try:
            with engine.begin() as conn:
                attempt_id = seed_failed_attempt(conn, datetime.now(UTC))
        finally:
            engine.dispose()
        yield server, attempt_id


@pytest.fixture
def attempt_page(big: tuple[StandaloneProcess, int], page: Any) -> Any:
    """The attempt's page, opened and ready (its tree rendered, the failure's log read)."""
    server, attempt_id = big
    page.goto(f"{server.endpoint}/ui/attempts/{attempt_id}")
    expect(page.locator("body")).to_have_attribute("data-attempt-ready", "true")
    return page


def visible_rows(page: Any) -> Any:
    return page.locator("#task-tree tbody tr[data-task-id]")


def test_the_failed_tasks_log_opens_beside_the_tree_at_once(attempt_page: Any) -> None:
    pane = attempt_page.locator("#log-pane")
    expect(pane.locator(".pane-task")).to_have_text(FAILED)
    expect(pane.locator("pre.log-view")).to_contain_text("table missing")
    expect(pane.locator("pre.log-view span.ansi-fg-31")).to_have_text("ERROR")
    tail = attempt_page.locator("section.failures pre.tail")  # its last lines, on top
    expect(tail.locator("span.ansi-fg-31")).to_have_text("ERROR")
    expect(tail).not_to_contain_text("window title")
    assert 0 < visible_rows(attempt_page).count() <= 400


def test_tasks_filter_by_state_across_the_whole_tree(attempt_page: Any) -> None:
    attempt_page.locator("#state-filter").select_option("canceled")
    canceled = (GROUPS - FAILED_STAGE - 1) * (STEPS + 1) + (STEPS - FAILED_STEP - 1)
    expect(attempt_page.locator("#filter-count")).to_have_text(f"{canceled} of 2041 tasks match")
    rows = attempt_page.locator('#task-tree tbody tr[data-state="canceled"]')
    expect(rows.first).to_be_visible()
    # The first 400 rows: the canceled tasks, after the root and the failed group that
    # hold the first of them.
    assert rows.count() == 400 - 2
    attempt_page.locator("#state-filter").select_option("")
    expect(attempt_page.locator("#filter-count")).to_contain_text("tasks shown")


def test_tasks_filter_by_part_of_a_name(attempt_page: Any) -> None:
    attempt_page.locator("#task-filter").fill("STAGE33+STEP04")
    expect(attempt_page.locator("#filter-count")).to_have_text("10 of 2041 tasks match")
    names = visible_rows(attempt_page).locator("a.open-log")
    expect(names).to_have_count(12)  # the ten, their group and the root
    expect(names.nth(2)).to_have_attribute("title", "+big+stage33+step040")


def test_jump_to_the_first_failure_shows_its_row_and_log(attempt_page: Any) -> None:
    attempt_page.locator("#log-pane .pane-close").click()
    attempt_page.locator("#collapse-all").click()
    expect(visible_rows(attempt_page)).to_have_count(1)
    attempt_page.get_by_role("button", name="First failure").click()
    row = attempt_page.locator("#task-tree tr.selected")
    expect(row.locator("a.open-log")).to_have_attribute("title", FAILED)
    expect(row).to_be_in_viewport()
    expect(attempt_page.locator("#log-pane pre.log-view")).to_contain_text("table missing")


def test_a_folded_group_hides_its_tasks_in_the_tree_and_the_graph(attempt_page: Any) -> None:
    stage = attempt_page.locator(
        "#task-tree tr", has=attempt_page.locator('a[title="+big+stage07"]')
    )
    group_id = stage.get_attribute("data-task-id")
    kids = attempt_page.locator('#task-tree a.open-log[title^="+big+stage07+"]')
    expect(kids).to_have_count(STEPS)
    graph_box = attempt_page.locator(f'#task-graph g.node[data-task-id="{group_id}"]')
    expect(graph_box).to_have_attribute("aria-expanded", "true")
    stage.locator("button.fold").click()
    expect(kids).to_have_count(0)
    expect(graph_box).to_have_attribute("aria-expanded", "false")
    expect(attempt_page.locator(f'#task-graph g.node[data-task-id="{group_id}"]')).to_have_class(
        "node collapsed"
    )
    attempt_page.get_by_role("button", name="Fit").click()  # the whole graph in its frame
    graph_box.click()  # and back, from the graph
    expect(kids).to_have_count(STEPS)


def test_any_tasks_log_opens_from_its_row(attempt_page: Any) -> None:
    attempt_page.locator('#task-tree a.open-log[title="+big+stage07+step003"]').click()
    pane = attempt_page.locator("#log-pane")
    expect(pane.locator(".pane-task")).to_have_text("+big+stage07+step003")
    expect(pane.locator(".log-note")).to_have_text("No log yet.")


def test_stored_values_show_with_the_projects_secrets_masked(attempt_page: Any) -> None:
    stored = attempt_page.locator("#log-pane .pane-stored")
    expect(stored.locator("li", has_text="rows")).to_contain_text("200")
    expect(stored.locator("li", has_text="api_key")).to_contain_text("***")
    expect(attempt_page.locator("#log-pane")).not_to_contain_text(SECRET)


def test_the_graph_zooms_and_fits(attempt_page: Any) -> None:
    graph = attempt_page.locator("#graph")
    expect(graph).to_have_attribute("data-zoom", re.compile(r"^\d"))
    before = float(graph.get_attribute("data-zoom") or 0)
    attempt_page.get_by_role("button", name="Zoom in").click()
    assert float(graph.get_attribute("data-zoom") or 0) > before
    attempt_page.get_by_role("button", name="Fit").click()
    fitted = float(graph.get_attribute("data-zoom") or 0)
    box = attempt_page.locator("#task-graph g.viewport").bounding_box()
    frame = graph.bounding_box()
    assert box is not None and frame is not None and fitted > 0
    assert box["width"] <= frame["width"] + 2 and box["height"] <= frame["height"] + 2


def test_escape_sequences_other_than_colours_are_dropped(attempt_page: Any) -> None:
    log = attempt_page.locator("#log-pane pre.log-view")
    expect(log).to_contain_text("progress done")
    expect(log).not_to_contain_text("window title")
    assert "\x1b" not in (log.text_content() or "")


def test_a_long_log_shows_its_tail_and_loads_earlier_parts_on_demand(attempt_page: Any) -> None:
    pane = attempt_page.locator("#log-pane")
    log = pane.locator("pre.log-view")
    expect(log).to_contain_text("table missing")
    expect(pane.locator(".log-note")).to_contain_text("The last 64.0 KiB of")
    expect(log).not_to_contain_text("loading batch 00000")
    pane.get_by_role("button", name="Load earlier").click()
    expect(log).to_contain_text("loading batch 00000\nloading batch 00001\n")
    expect(pane.get_by_role("button", name="Load earlier")).to_be_hidden()
    assert (log.text_content() or "").count("loading batch 04000\n") == 1  # nothing twice
