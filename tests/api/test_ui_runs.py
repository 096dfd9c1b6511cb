"""The sessions and attempts lists and the attempt page, rendered by the API service."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import Engine, select, update

from tests.api._seed import NOW, THREE_STEPS, add_project, add_sessions
from tickwork.services.api.config import ApiConfig
from tickwork.shared.domain.states import AttemptState
from tickwork.shared.store.logs import LogChunk, write_log_chunks
from tickwork.shared.store.tables import attempts, task_dependencies, task_logs, tasks

XSS = "<script>window.__x=1</script>"


def attempt_links(html: str) -> list[int]:
    """The attempt ids a list page links to, in order."""
    return [int(found) for found in re.findall(r'href="/ui/attempts/(\d+)"', html)]


def next_link(html: str) -> str | None:
    """The href of the page's "next page" link, unescaped."""
    found = re.search(r'<a rel="next" href="([^"]+)"', html)
    return None if found is None else found.group(1).replace("&amp;", "&")


@pytest.fixture
def etl(engine: Engine) -> int:
    """A project ``etl`` with the workflow ``steps``; its id."""
    with engine.begin() as conn:
        return add_project(conn, "etl", {"steps": THREE_STEPS, "other": THREE_STEPS})


class TestLists:
    def test_the_sessions_list_shows_each_session_with_its_last_attempt(
        self, api: FlaskClient, engine: Engine, etl: int
    ) -> None:
        add_sessions(engine, etl, "steps", 2, state=AttemptState.ERROR)
        response = api.get("/ui/sessions")
        html = response.get_data(as_text=True)
        assert response.status_code == 200
        assert attempt_links(html) == [2, 1]
        assert 'class="state state-error">error</span>' in html
        assert '<time datetime="2026-11-30T09:00:00Z"' in html

    def test_lists_filter_by_project_workflow_state_and_session_time(
        self, api: FlaskClient, engine: Engine, etl: int
    ) -> None:
        add_sessions(engine, etl, "steps", 3)
        add_sessions(engine, etl, "other", 1, state=AttemptState.ERROR)
        for path in ("/ui/sessions", "/ui/attempts"):
            assert attempt_links(api.get(f"{path}?workflow=other").get_data(as_text=True)) == [4]
            assert attempt_links(api.get(f"{path}?state=error").get_data(as_text=True)) == [4]
            assert attempt_links(api.get(f"{path}?project=nope").get_data(as_text=True)) == []
            later = (NOW + timedelta(hours=1)).isoformat()
            ranged = api.get(f"{path}", query_string={"workflow": "steps", "from": later})
            assert attempt_links(ranged.get_data(as_text=True)) == [3, 2]
            until = api.get(f"{path}", query_string={"project": "etl", "to": later})
            assert attempt_links(until.get_data(as_text=True)) == [4, 1]

    def test_lists_match_parts_of_names_in_any_case(
        self, api: FlaskClient, engine: Engine, etl: int
    ) -> None:
        add_sessions(engine, etl, "steps", 2)
        add_sessions(engine, etl, "other", 1, state=AttemptState.ERROR)
        for path in ("/ui/sessions", "/ui/attempts"):
            found = api.get(
                path, query_string={"project_contains": "eT", "workflow_contains": "TH"}
            )
            assert attempt_links(found.get_data(as_text=True)) == [3]
            found = api.get(path, query_string={"project_contains": "nope"})
            assert attempt_links(found.get_data(as_text=True)) == []

    def test_an_exact_name_from_a_link_is_kept_and_can_be_dropped(
        self, api: FlaskClient, engine: Engine, etl: int
    ) -> None:
        add_sessions(engine, etl, "steps", 1)
        html = api.get("/ui/sessions?project=etl&workflow=steps").get_data(as_text=True)
        assert '<input type="hidden" name="project" value="etl">' in html
        assert '<input type="hidden" name="workflow" value="steps">' in html
        assert 'href="?project=etl"' in html  # "any workflow" keeps the project

    def test_the_live_part_of_a_list_is_its_table_with_whether_anything_runs(
        self, api: FlaskClient, engine: Engine, etl: int
    ) -> None:
        add_sessions(engine, etl, "steps", 1)
        add_sessions(engine, etl, "other", 1, state=AttemptState.RUNNING)
        for path in ("/ui/sessions", "/ui/attempts"):
            page = api.get(f"{path}?workflow=steps").get_data(as_text=True)
            assert f'data-live-part="{path}/live?workflow=steps"' in page
            live = api.get(f"{path}/live?workflow=steps")
            html = live.get_data(as_text=True)
            assert live.status_code == 200
            assert "<html" not in html
            assert 'data-live-active="false"' in html
            assert attempt_links(html) == [1]
            running = api.get(f"{path}/live?state=running").get_data(as_text=True)
            assert 'data-live-active="true"' in running
            assert "running for" in running
            assert api.get(f"{path}/live?state=sleepy").status_code == 400
            # a list whose filter cannot be used does not fetch itself again
            assert "data-live-part" not in api.get(f"{path}?state=sleepy").get_data(as_text=True)

    def test_an_ended_attempt_shows_how_long_it_took(
        self, api: FlaskClient, engine: Engine, etl: int
    ) -> None:
        add_sessions(engine, etl, "steps", 1)
        with engine.begin() as conn:
            conn.execute(update(attempts).values(finished_at=NOW + timedelta(minutes=3, seconds=4)))
            created = conn.execute(select(attempts.c.created_at)).scalar_one()
        took = NOW + timedelta(minutes=3, seconds=4) - created
        html = api.get("/ui/attempts").get_data(as_text=True)
        minutes, seconds = divmod(int(took.total_seconds()), 60)
        assert f'<td class="duration">{minutes}m {seconds:02d}s</td>' in html

    def test_a_list_pages_with_a_cursor_keeping_its_filters(
        self, api: FlaskClient, engine: Engine, etl: int
    ) -> None:
        add_sessions(engine, etl, "steps", 120)
        first = api.get("/ui/attempts?workflow=steps").get_data(as_text=True)
        assert attempt_links(first) == list(range(120, 70, -1))
        link = next_link(first)
        assert link is not None and "workflow=steps" in link and "cursor=" in link
        second = api.get(link).get_data(as_text=True)
        assert attempt_links(second) == list(range(70, 20, -1))
        third_link = next_link(second)
        assert third_link is not None
        third = api.get(third_link).get_data(as_text=True)
        assert attempt_links(third) == list(range(20, 0, -1))
        assert next_link(third) is None

    @pytest.mark.parametrize(
        ("query", "said"),
        [
            ("state=sleepy", "state: &#39;sleepy&#39; is not one of"),
            ("from=yesterday", "from:"),
            ("from=2026-12-02T00:00:00Z&to=2026-12-01T00:00:00Z", "to: must be later"),
            ("cursor=not-a-cursor", "cursor: not a cursor"),
        ],
    )
    def test_a_filter_that_cannot_be_used_is_said_on_the_page_with_400(
        self, api: FlaskClient, query: str, said: str
    ) -> None:
        for path in ("/ui/sessions", "/ui/attempts"):
            response = api.get(f"{path}?{query}")
            html = response.get_data(as_text=True)
            assert response.status_code == 400
            assert response.mimetype == "text/html"
            assert 'class="problem" role="alert"' in html
            assert said in html


def add_task(conn: Any, name: str, **values: Any) -> int:
    """A task of attempt 1; its id."""
    row = {
        "attempt_id": 1,
        "parent_id": None,
        "full_name": name,
        "position": 0,
        "is_group": False,
        "is_generated": False,
        "state": "success",
        "config": {},
        "created_at": NOW,
        "updated_at": NOW,
        **values,
    }
    return int(conn.execute(tasks.insert().returning(tasks.c.id), row).scalar_one())


def add_log(conn: Any, task_id: int, content: str, *, ended: bool = True) -> None:
    """Index and store the log of a run of a task of attempt 1."""
    relative = f"1/task.{task_id}.1.log"
    write_log_chunks(conn, [LogChunk(task_id, 1, 0, content.encode())])
    conn.execute(
        task_logs.insert(),
        {
            "task_id": task_id,
            "attempt_id": 1,
            "lease_token": 1,
            "path": relative,
            "size_bytes": len(content.encode()) if ended else 0,
            "truncated_bytes": 0,
            "created_at": NOW,
            "ended_at": NOW if ended else None,
        },
    )


@pytest.fixture
def failed_attempt(engine: Engine, etl: int, api_config: ApiConfig) -> dict[str, int]:
    """Attempt 1 ended in error: ``+steps+load`` failed (with a log), so did its parent;
    ``+steps+first`` succeeded. A param, a task name and a log line hold a script tag."""
    add_sessions(engine, etl, "steps", 1, state=AttemptState.ERROR)
    later = NOW + timedelta(seconds=30)
    with engine.begin() as conn:
        conn.execute(update(attempts).values(params={"note": XSS}))
        group = add_task(conn, "+steps", is_group=True, state="error", started_at=NOW)
        load = add_task(
            conn,
            "+steps+load",
            parent_id=group,
            position=1,
            state="error",
            retry_count=2,
            error={"message": "exit code 3: table missing"},
            started_at=NOW + timedelta(seconds=10),
            finished_at=later,
        )
        first = add_task(
            conn,
            "+steps+first",
            parent_id=group,
            position=0,
            started_at=NOW,
            finished_at=NOW + timedelta(seconds=10),
        )
        odd = add_task(conn, f"+steps+{XSS}", parent_id=group, position=2, state="blocked")
        conn.execute(task_dependencies.insert(), {"downstream_id": load, "upstream_id": first})
        add_log(conn, load, "connecting\n" + XSS + "\nERROR: table missing\n")
    return {"group": group, "load": load, "first": first, "odd": odd}


@pytest.fixture
def large_attempt(engine: Engine, etl: int) -> dict[str, int]:
    """Attempt 1 still running: a group ``+wide`` of 400 tasks, the last one failed and
    the one before it running, the rest succeeded."""
    add_sessions(engine, etl, "steps", 1, state=AttemptState.RUNNING)
    with engine.begin() as conn:
        group = add_task(conn, "+wide", is_group=True, state="running", started_at=NOW)
        states = ["success"] * 398 + ["running", "error"]
        rows = [
            {
                "attempt_id": 1,
                "parent_id": group,
                "full_name": f"+wide+t{index:03d}",
                "position": index,
                "is_group": False,
                "is_generated": False,
                "state": state,
                "config": {},
                "error": {"message": "disk full"} if state == "error" else None,
                "created_at": NOW,
                "updated_at": NOW,
            }
            for index, state in enumerate(states)
        ]
        conn.execute(tasks.insert(), rows)
        ids = {name: id_ for name, id_ in conn.execute(select(tasks.c.full_name, tasks.c.id))}
    return {"group": group, "running": ids["+wide+t398"], "failed": ids["+wide+t399"]}


def tree_row_ids(html: str) -> list[int]:
    """The task ids of the tree's rows, in order."""
    return [int(found) for found in re.findall(r'<tr id="task-(\d+)"', html)]


class TestAttemptPage:
    def test_the_reason_a_failed_attempt_failed_is_on_top(
        self, api: FlaskClient, failed_attempt: dict[str, int]
    ) -> None:
        html = api.get("/ui/attempts/1").get_data(as_text=True)
        why = html[html.index('id="why"') : html.index('id="tasks"')]
        assert "+steps+load" in why
        assert "+steps</a>" not in why  # the parent failed only because its child did
        assert "exit code 3: table missing" in why
        assert "ERROR: table missing" in why

    def test_the_task_tree_is_in_tree_order_with_states_retries_and_current_errors(
        self, api: FlaskClient, failed_attempt: dict[str, int]
    ) -> None:
        html = api.get("/ui/attempts/1").get_data(as_text=True)
        rows = re.findall(r'<tr id="task-(\d+)" data-task-id="\d+" data-state="(\w+)"', html)
        ids = failed_attempt
        assert rows == [
            (str(ids["group"]), "error"),
            (str(ids["first"]), "success"),
            (str(ids["load"]), "error"),
            (str(ids["odd"]), "blocked"),
        ]
        load_row = html[
            html.index(f'id="task-{ids["load"]}"') : html.index(f'id="task-{ids["odd"]}"')
        ]
        assert "<td>2</td>" in load_row
        assert "20.0s" in load_row
        assert 'class="run st-error" x="' in load_row  # its bar on the timeline

    def test_the_graph_data_holds_each_task_and_its_upstream_edges(
        self, api: FlaskClient, failed_attempt: dict[str, int]
    ) -> None:
        html = api.get("/ui/attempts/1").get_data(as_text=True)
        assert '<script type="application/json" id="attempt-graph">' in html
        block = html[html.index('id="attempt-graph">') :]
        assert f"[{failed_attempt['first']},{failed_attempt['load']}]" in block

    def test_a_task_log_reads_as_text_through_the_ui(
        self, api: FlaskClient, failed_attempt: dict[str, int]
    ) -> None:
        response = api.get(f"/ui/attempts/1/tasks/{failed_attempt['load']}/log")
        assert response.status_code == 200
        assert response.mimetype == "text/plain"
        assert response.get_data(as_text=True).endswith("ERROR: table missing\n")

    def test_the_log_of_a_run_still_going_reads_as_far_as_written(
        self, api: FlaskClient, engine: Engine, api_config: ApiConfig, etl: int
    ) -> None:
        add_sessions(engine, etl, "steps", 1, state=AttemptState.RUNNING)
        with engine.begin() as conn:
            task = add_task(conn, "+steps+first", state="running", started_at=NOW)
            add_log(conn, task, "still going\n", ended=False)
        html = api.get("/ui/attempts/1").get_data(as_text=True)
        assert 'data-follow-url="/ui/attempts/1/follow"' in html
        assert 'data-done="false"' in html
        assert api.get(f"/ui/attempts/1/tasks/{task}/log").get_data(as_text=True) == (
            "still going\n"
        )

    def test_a_script_in_a_name_a_param_or_a_log_shows_as_text(
        self, api: FlaskClient, failed_attempt: dict[str, int]
    ) -> None:
        html = api.get("/ui/attempts/1").get_data(as_text=True)
        assert XSS not in html
        assert "&lt;script&gt;window.__x=1&lt;/script&gt;" in html
        live = api.get("/ui/attempts/1/live").get_data(as_text=True)
        assert XSS not in live

    def test_the_live_part_holds_the_state_and_tree_only(
        self, api: FlaskClient, failed_attempt: dict[str, int]
    ) -> None:
        live = api.get("/ui/attempts/1/live").get_data(as_text=True)
        assert live.strip().startswith('<div id="attempt-live" data-done="true"')
        assert "<html" not in live
        assert f'id="task-{failed_attempt["load"]}"' in live

    def test_a_large_tree_is_folded_but_shows_its_failed_and_running_tasks(
        self, api: FlaskClient, large_attempt: dict[str, int]
    ) -> None:
        for path in ("/ui/attempts/1", "/ui/attempts/1/live"):
            html = api.get(path).get_data(as_text=True)
            rows = tree_row_ids(html)
            assert 100 < len(rows) <= 160
            assert rows[0] == large_attempt["group"]
            assert rows[-2:] == [large_attempt["running"], large_attempt["failed"]]
            assert 'Tasks <span class="muted">(401)</span>' in html
            assert f'href="?tree=all#task-{large_attempt["group"]}"' in html
            assert "disk full" in html

    def test_the_whole_tree_of_a_large_attempt_is_shown_on_request(
        self, api: FlaskClient, large_attempt: dict[str, int]
    ) -> None:
        html = api.get("/ui/attempts/1?tree=all").get_data(as_text=True)
        assert len(tree_row_ids(html)) == 401
        assert 'data-live-url="/ui/attempts/1/live?tree=all"' in html
        live = api.get("/ui/attempts/1/live?tree=all").get_data(as_text=True)
        assert len(tree_row_ids(live)) == 401

    def test_the_graph_data_of_a_large_attempt_holds_every_task(
        self, api: FlaskClient, large_attempt: dict[str, int]
    ) -> None:
        html = api.get("/ui/attempts/1").get_data(as_text=True)
        block = html[html.index('id="attempt-graph">') + len('id="attempt-graph">') :]
        data = json.loads(block[: block.index("</script>")])
        assert len(data["tasks"]) == 401
        assert data["tasks"][0] == {
            "id": large_attempt["group"],
            "name": "+wide",
            "state": "running",
            "group": True,
            "full_name": "+wide",
            "started": int(NOW.timestamp()),
        }
        assert data["tasks"][1] == {
            "id": large_attempt["group"] + 1,
            "name": "+t000",
            "state": "success",
            "parent": large_attempt["group"],
        }

    def test_an_unknown_attempt_is_a_404_page(self, api: FlaskClient) -> None:
        response = api.get("/ui/attempts/99")
        assert response.status_code == 404
        assert "No attempt 99" in response.get_data(as_text=True)
