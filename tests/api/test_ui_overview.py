"""The overview page (/ui/): what runs, what failed in the last day and where, the next
scheduled runs, schedules needing attention and missed times; each section bounded."""

from __future__ import annotations

from datetime import timedelta

import pytest
from flask.testing import FlaskClient
from sqlalchemy import Connection, Engine, select

from tests.api._seed import (
    NOW,
    THREE_STEPS,
    add_project,
    add_sessions,
    definition_id_of,
    set_state,
)
from tests.api._ui_pages import attempts_of, fail, section
from tests.api.conftest import Pusher
from tickwork.shared.clock import utc_now
from tickwork.shared.domain.catchup import MissedRange
from tickwork.shared.domain.schedule_policies import MissedReason
from tickwork.shared.domain.states import AttemptState
from tickwork.shared.store.schedules import pause_schedule, record_missed
from tickwork.shared.store.sessions import insert_attempt
from tickwork.shared.store.tables import attempts, projects, schedules, sessions


@pytest.fixture
def project(engine: Engine) -> int:
    with engine.begin() as conn:
        return add_project(conn, "etl", {"steps": THREE_STEPS})


def schedule_of(conn: Connection, project: str) -> int:
    """The id of the schedule of ``project``'s workflow ``daily``."""
    query = (
        select(schedules.c.id)
        .join(projects, projects.c.id == schedules.c.project_id)
        .where(projects.c.name == project, schedules.c.workflow_name == "daily")
    )
    return int(conn.execute(query).scalar_one())


def overview(client: FlaskClient) -> str:
    response = client.get("/ui/")
    assert response.status_code == 200
    assert response.mimetype == "text/html"
    return response.get_data(as_text=True)


def test_an_empty_store_says_nothing_runs_failed_or_is_due(read_api: FlaskClient) -> None:
    html = overview(read_api)
    assert "Nothing is running." in section(html, "running")
    assert "No attempt failed in the last 24 hours." in section(html, "failures")
    assert "No schedule is due." in section(html, "next-runs")
    assert "No schedule missed a time." in section(html, "missed")


def test_a_failure_of_the_last_day_shows_its_failing_task_and_its_error(
    read_api: FlaskClient, engine: Engine, project: int
) -> None:
    [attempt] = attempts_of(engine, add_sessions(engine, project, "steps", 1))
    fail(engine, attempt, "+steps+second", "exit code 3: no such table", utc_now())

    failures = section(overview(read_api), "failures")

    assert f'href="/ui/attempts/{attempt}"' in failures
    assert "<code>+steps+second</code>" in failures
    assert "exit code 3: no such table" in failures
    assert "<code>+steps</code>" not in failures  # the group failed only because of its child
    assert "a child failed" not in failures


def test_failures_older_than_a_day_or_retried_since_are_left_out(
    read_api: FlaskClient, engine: Engine, project: int
) -> None:
    old, retried = attempts_of(engine, add_sessions(engine, project, "steps", 2))
    fail(engine, old, "+steps+second", "an old failure", utc_now() - timedelta(hours=25))
    fail(engine, retried, "+steps+third", "a failure retried since", utc_now())
    with engine.begin() as conn:
        retried_session = conn.execute(
            select(attempts.c.session_id).where(attempts.c.id == retried)
        ).scalar_one()
        insert_attempt(
            conn,
            session_id=retried_session,
            name="retry",
            workflow_definition_id=definition_id_of(conn, project, "steps"),
            timezone="UTC",
            params={},
            now=NOW,
        )

    failures = section(overview(read_api), "failures")

    assert "No attempt failed in the last 24 hours." in failures
    assert "an old failure" not in failures
    assert "a failure retried since" not in failures


def test_running_attempts_link_to_their_attempt_page(
    read_api: FlaskClient, engine: Engine, project: int
) -> None:
    running, done = attempts_of(engine, add_sessions(engine, project, "steps", 2))
    with engine.begin() as conn:
        set_state(conn, running, AttemptState.RUNNING)

    html = overview(read_api)

    assert f'href="/ui/attempts/{running}"' in section(html, "running")
    assert f'href="/ui/attempts/{done}"' not in section(html, "running")
    assert 'href="/ui/projects/etl/workflows/steps"' in section(html, "running")


def test_next_runs_come_soonest_first_and_a_paused_schedule_is_listed_as_paused(
    read_api: FlaskClient, engine: Engine, push: Pusher
) -> None:
    due = {"late": timedelta(hours=5), "early": timedelta(hours=1), "held": timedelta(hours=2)}
    for name in due:
        assert push(name).status_code == 201
    with engine.begin() as conn:
        for name, later in due.items():
            schedule_id = schedule_of(conn, name)
            conn.execute(
                schedules.update()
                .where(schedules.c.id == schedule_id)
                .values(next_run_time=utc_now() + later)
            )
        pause_schedule(conn, schedule_of(conn, "held"), utc_now())

    html = overview(read_api)
    next_runs, troubled = section(html, "next-runs"), section(html, "troubled")

    assert next_runs.index("/ui/projects/early") < next_runs.index("/ui/projects/late")
    assert "/ui/projects/held" not in next_runs
    assert "held / daily" in troubled and "paused" in troubled
    assert "early / daily" not in troubled


def test_a_schedule_whose_latest_session_failed_is_listed_as_failing(
    read_api: FlaskClient, engine: Engine, push: Pusher
) -> None:
    assert push("nightly").status_code == 201
    with engine.begin() as conn:
        schedule = conn.execute(select(schedules.c.id, schedules.c.project_id)).one()
    [session] = add_sessions(engine, int(schedule.project_id), "daily", 1)
    with engine.begin() as conn:
        conn.execute(
            sessions.update().where(sessions.c.id == session).values(schedule_id=schedule.id)
        )
    [attempt] = attempts_of(engine, [session])
    fail(engine, attempt, "+daily+load", "load failed", utc_now())

    troubled = section(overview(read_api), "troubled")

    assert "nightly / daily" in troubled
    assert "failing" in troubled
    assert f'href="/ui/attempts/{attempt}"' in troubled


def test_missed_times_show_their_reason(
    read_api: FlaskClient, engine: Engine, push: Pusher
) -> None:
    assert push("nightly").status_code == 201
    with engine.begin() as conn:
        schedule_id = int(conn.execute(select(schedules.c.id)).scalar_one())
        missed = MissedRange(
            NOW - timedelta(days=3), NOW - timedelta(days=1), 3, MissedReason("catchup")
        )
        record_missed(conn, schedule_id, [missed], utc_now())

    missed_html = section(overview(read_api), "missed")

    assert f'href="/ui/schedules/{schedule_id}"' in missed_html
    assert "catchup" in missed_html and "dropped by the catch-up policy" in missed_html
    assert "<td>3</td>" in missed_html


def test_each_section_is_bounded_and_links_to_the_rest(
    read_api: FlaskClient, engine: Engine, project: int
) -> None:
    attempt_ids = attempts_of(engine, add_sessions(engine, project, "steps", 22))
    for attempt in attempt_ids:
        fail(engine, attempt, "+steps+second", f"failure of {attempt}", utc_now())

    failures = section(overview(read_api), "failures")

    assert failures.count('class="failure"') == 20
    assert f"failure of {attempt_ids[-1]}<" in failures  # newest first
    assert f"failure of {attempt_ids[0]}<" not in failures
    assert 'href="/ui/sessions?state=error"' in failures


def test_an_error_message_holding_markup_is_shown_as_text(
    read_api: FlaskClient, engine: Engine, project: int
) -> None:
    [attempt] = attempts_of(engine, add_sessions(engine, project, "steps", 1))
    fail(engine, attempt, "+steps+second", "<script>alert(1)</script>", utc_now())

    html = overview(read_api)

    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
