"""The project pages: the project list, a project (workflows, schedules, revisions with
their archives, secrets by name only) and a workflow (its source, its schedule's next
times, and the grid of its recent sessions by task)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from cryptography.fernet import Fernet
from flask.testing import FlaskClient
from markupsafe import escape
from sqlalchemy import Engine, event

from tests.api._seed import THREE_STEPS, add_project, add_sessions
from tests.api._ui_pages import add_tasks, attempts_of, fail, section
from tests.api.conftest import DAILY_WORKFLOW, Pusher
from tickwork.shared.clock import utc_now
from tickwork.shared.store.secrets import SecretInfo


def page(client: FlaskClient, path: str, status: int = 200) -> str:
    response = client.get(path)
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.mimetype == "text/html"
    return response.get_data(as_text=True)


@pytest.fixture
def steps(engine: Engine) -> int:
    """Project ``etl`` (not pushed) with workflow ``steps``: +first, +second, +third."""
    with engine.begin() as conn:
        return add_project(conn, "etl", {"steps": THREE_STEPS})


def test_the_project_list_shows_each_project_its_latest_revision_and_workflows(
    read_api: FlaskClient, push: Pusher
) -> None:
    two = {"daily.dig": DAILY_WORKFLOW, "hello.dig": "+hello:\n  echo>: hi\n"}
    assert push("sales", revision="v1").status_code == 201
    assert push("sales", two, revision="v2").status_code == 201
    assert push("ops", revision="first").status_code == 201

    rows = re.findall(r"<tr>(.*?)</tr>", page(read_api, "/ui/projects"), re.S)[1:]

    assert len(rows) == 2
    assert 'href="/ui/projects/ops"' in rows[0]  # newest first
    assert 'href="/ui/projects/sales"' in rows[1]
    assert "<td>v2</td>" in rows[1] and "<td>2</td>" in rows[1]
    assert "<td>first</td>" in rows[0] and "<td>1</td>" in rows[0]


def test_a_project_shows_its_workflows_schedules_revisions_and_archives(
    read_api: FlaskClient, push: Pusher
) -> None:
    assert push("sales", revision="v1").status_code == 201
    assert (
        push(
            "sales", {"daily.dig": DAILY_WORKFLOW, "adhoc.dig": "+a:\n  echo>: a\n"}, revision="v2"
        ).status_code
        == 201
    )

    html = page(read_api, "/ui/projects/sales")

    workflows = section(html, "workflows")
    assert 'href="/ui/projects/sales/workflows/daily"' in workflows
    assert 'href="/ui/projects/sales/workflows/adhoc"' in workflows
    schedules = section(html, "schedules")
    assert re.search(r'href="/ui/schedules/\d+">daily</a>', schedules)
    assert "+09:00" in schedules  # the next times in the schedule's zone (Asia/Tokyo)
    assert "adhoc" not in schedules
    revisions = section(html, "revisions")
    assert revisions.index("<td>v2</td>") < revisions.index("<td>v1</td>")
    assert 'href="/ui/projects/sales/archive?revision=v1"' in revisions


def test_the_archive_download_holds_the_bytes_the_rest_api_answers(
    api: FlaskClient, read_api: FlaskClient, push: Pusher
) -> None:
    assert push("sales", revision="v1").status_code == 201
    assert push("sales", {"other.dig": "+o:\n  echo>: o\n"}, revision="v2").status_code == 201

    for revision in ("v1", "v2"):
        downloaded = read_api.get(f"/ui/projects/sales/archive?revision={revision}")
        rest = api.get(f"/api/projects/sales/archive?revision={revision}")
        assert downloaded.status_code == 200
        assert downloaded.mimetype == "application/gzip"
        assert downloaded.data == rest.data
        assert f"sales-{revision}.tar.gz" in downloaded.headers["Content-Disposition"]
    page(read_api, "/ui/projects/sales/archive?revision=v9", status=404)


def test_revisions_are_paged_newest_first(read_api: FlaskClient, push: Pusher) -> None:
    for index in range(23):
        files = {"daily.dig": DAILY_WORKFLOW + f"# {index}\n"}
        assert push("sales", files, revision=f"r{index:02d}").status_code == 201

    first = section(page(read_api, "/ui/projects/sales"), "revisions")
    older = re.search(r'rel="next" href="([^"]+)"', first)
    assert older is not None
    rest = section(page(read_api, older.group(1).replace("&amp;", "&")), "revisions")

    assert first.count("<td>r") == 20 and "<td>r22</td>" in first and "<td>r02</td>" not in first
    assert rest.count("<td>r") == 3 and "<td>r02</td>" in rest and "<td>r00</td>" in rest


def test_secrets_are_listed_by_name_and_their_values_never_reach_the_page(
    api: FlaskClient,
    read_api: FlaskClient,
    push: Pusher,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TICKWORK_SECRET_KEY", Fernet.generate_key().decode())
    assert push("sales").status_code == 201
    put = api.put("/api/projects/sales/secrets/db.password", json={"value": "hunter2-value"})
    assert put.status_code in (200, 201)

    html = page(read_api, "/ui/projects/sales")

    assert "<code>db.password</code>" in section(html, "secrets")
    assert "hunter2-value" not in html
    assert {f.name for f in dataclasses.fields(SecretInfo)} == {"name", "created_at", "updated_at"}


def test_a_workflow_shows_its_source_with_line_numbers_and_its_next_session_times(
    api: FlaskClient, push: Pusher
) -> None:
    assert push("sales").status_code == 201

    html = page(api, "/ui/projects/sales/workflows/daily")

    source = section(html, "definition")
    for number, line in enumerate(DAILY_WORKFLOW.splitlines(), start=1):
        escaped = str(escape(line))
        assert f'id="L{number}"><span class="ln">{number}</span>{escaped}</span>' in source
    schedule = section(html, "schedule")
    times = re.findall(r"<time [^>]*>([^<]+)</time>", schedule)
    assert len(times) == 20  # ten session times (midnight in Tokyo), each run at 07:00
    assert all(time.endswith("00:00:00+09:00") for time in times[0::2])
    assert all(time.endswith("07:00:00+09:00") for time in times[1::2])
    assert 'href="/ui/projects/sales/workflows/daily/start"' in html  # an admin may start it


def test_the_grid_shows_each_session_by_task_coloured_and_linking_to_its_attempt(
    read_api: FlaskClient, engine: Engine, steps: int
) -> None:
    good, bad = attempts_of(engine, add_sessions(engine, steps, "steps", 2))
    add_tasks(
        engine,
        good,
        [
            ("+steps", None, "success", None),
            ("+steps+first", 0, "success", None),
            ("+steps+second", 0, "success", None),
            ("+steps+third", 0, "success", None),
        ],
    )
    fail(engine, bad, "+steps+second", "boom", utc_now())

    grid = section(page(read_api, "/ui/projects/etl/workflows/steps"), "grid")

    names = re.findall(
        r'<th scope="row" class="task-name depth-(\d)[^"]*"><code>([^<]+)</code>', grid
    )
    assert names == [
        ("0", "+steps"),
        ("1", "+steps+first"),
        ("1", "+steps+second"),
        ("1", "+steps+third"),
    ]
    second = re.search(r"<code>\+steps\+second</code></th>(.*?)</tr>", grid, re.S)
    assert second is not None
    cells = re.findall(
        r'<a class="cell cell-(\w+)" href="/ui/attempts/(\d+)" title="([^"]+)"', second.group(1)
    )
    assert [(state, int(attempt)) for state, attempt, _ in cells] == [
        ("success", good),
        ("error", bad),
    ]
    assert cells[1][2] == "+steps+second · error · 2026-11-30 09:00:00Z"
    third = re.search(r"<code>\+steps\+third</code></th>(.*?)</tr>", grid, re.S)
    assert third is not None and third.group(1).count("<a ") == 1  # the failed one never ran it


@contextmanager
def counted_statements(engine: Engine) -> Iterator[list[str]]:
    """The SQL statements run on ``engine`` meanwhile."""
    seen: list[str] = []

    def count(*args: Any) -> None:
        seen.append(str(args[2]))

    event.listen(engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", count)


def test_the_grid_pages_older_sessions_with_as_many_queries_for_many_sessions_as_for_few(
    read_api: FlaskClient, engine: Engine, steps: int
) -> None:
    attempt_ids = attempts_of(engine, add_sessions(engine, steps, "steps", 1))
    with counted_statements(engine) as few:
        page(read_api, "/ui/projects/etl/workflows/steps")
    attempt_ids += attempts_of(
        engine, add_sessions(engine, steps, "steps", 29, first_time=utc_now())
    )
    for attempt in attempt_ids:
        add_tasks(engine, attempt, [("+steps", None, "success", None)])

    with counted_statements(engine) as many:
        newest = section(page(read_api, "/ui/projects/etl/workflows/steps"), "grid")
    older = re.search(r'rel="next" href="([^"]+)"', newest)
    assert older is not None
    oldest = section(page(read_api, older.group(1).replace("&amp;", "&")), "grid")

    assert len(many) == len(few)
    assert newest.count('<th scope="col" class="col">') == 25
    assert oldest.count('<th scope="col" class="col">') == 5
    assert f'href="/ui/attempts/{attempt_ids[0]}"' in oldest
    assert f'href="/ui/attempts/{attempt_ids[0]}"' not in newest


@pytest.mark.parametrize(
    "path",
    [
        "/ui/projects/nope",
        "/ui/projects/nope/workflows/daily",
        "/ui/projects/sales/workflows/nope",
        "/ui/projects/nope/archive",
    ],
)
def test_a_project_or_workflow_that_does_not_exist_is_a_404_page(
    read_api: FlaskClient, push: Pusher, path: str
) -> None:
    assert push("sales").status_code == 201
    assert "Not found" in page(read_api, path, status=404)


def test_markup_in_a_name_or_a_parameter_is_shown_as_text(
    read_api: FlaskClient, push: Pusher
) -> None:
    assert push("sales").status_code == 201
    script = "<script>alert(1)</script>"
    tag = "<img src=x onerror=alert(1)>"  # a path segment holds no slash

    missing = page(read_api, f"/ui/projects/{tag}", status=404)
    bad_cursor = page(read_api, f"/ui/projects/sales?cursor={script}", status=422)
    other = page(read_api, f"/ui/projects/sales/workflows/daily?revision={script}", status=404)

    assert tag not in missing and "&lt;img src=x onerror=alert(1)&gt;" in missing
    for html in (bad_cursor, other):
        assert script not in html


def test_a_read_token_sees_the_workflow_but_no_start_link(
    read_api: FlaskClient, push: Pusher
) -> None:
    assert push("sales").status_code == 201

    html = page(read_api, "/ui/projects/sales/workflows/daily")

    assert "/ui/projects/sales/workflows/daily/start" not in html
