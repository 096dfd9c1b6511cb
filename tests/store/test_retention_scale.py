"""Retention on a large history in PostgreSQL, beside a live 2,000-task attempt."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from sqlalchemy import Connection, Engine, func, select, text

from tests.support.history_seed import DAY, NOW, add_project, add_revision, add_run, count_rows
from tickwork.shared.domain.states import AttemptState
from tickwork.shared.store.engine import create_store_engine
from tickwork.shared.store.retention import RetentionPolicy, prune_history
from tickwork.shared.store.retention_batches import BatchLimits
from tickwork.shared.store.tables import attempts, sessions, tasks

OLD_SESSIONS = 40_000
TASKS_PER_ATTEMPT = 8
LIVE_TASKS = 2_000

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

FAST = BatchLimits(sessions=500, tasks=20_000, pause_seconds=0)


@pytest.fixture
def pg(migrated_postgres_url: str) -> Iterator[Engine]:
    engine = create_store_engine(migrated_postgres_url)
    yield engine
    engine.dispose()


def seed_old_history(conn: Connection, project_id: int, definition_id: int) -> None:
    """OLD_SESSIONS finished sessions 100 to 200 days old, each with an attempt, 8 tasks,
    4 dependencies, 4 logs and 2 chunks: about a million rows, set-based."""
    params = {"p": project_id, "d": definition_id, "n": OLD_SESSIONS, "now": NOW}
    conn.execute(
        text(
            "INSERT INTO sessions (project_id, workflow_name, session_time, session_uuid,"
            " created_at) SELECT :p, 'old', t, gen_random_uuid()::text, t FROM ("
            " SELECT CAST(:now AS timestamptz) - interval '200 days' + g * interval '1 minute'"
            " AS t FROM generate_series(1, :n) g) s"
        ),
        params,
    )
    conn.execute(
        text(
            "INSERT INTO attempts (session_id, name, workflow_definition_id, state, timezone,"
            " params, created_at, finished_at) SELECT id, 'a', :d, 'success', 'UTC', '{}',"
            " created_at, created_at + interval '1 hour' FROM sessions WHERE workflow_name = 'old'"
        ),
        params,
    )
    conn.execute(
        text(
            "INSERT INTO tasks (attempt_id, full_name, position, is_group, is_generated, state,"
            " config, retry_count, lease_token, lost_count, created_at, updated_at)"
            " SELECT a.id, '+t' || g, g, false, false, 'success', '{}', 0, 1, 0, a.created_at,"
            " a.created_at FROM attempts a CROSS JOIN generate_series(1, :k) g"
            " JOIN sessions s ON s.id = a.session_id WHERE s.workflow_name = 'old'"
        ),
        {"k": TASKS_PER_ATTEMPT},
    )
    conn.execute(
        text(
            "INSERT INTO task_dependencies (upstream_id, downstream_id) SELECT id, id + 1"
            " FROM tasks WHERE position <= 4 AND full_name LIKE '+t%'"
        )
    )
    conn.execute(
        text(
            "INSERT INTO task_logs (task_id, attempt_id, lease_token, path, size_bytes,"
            " created_at) SELECT id, attempt_id, 1, 'p', 10, created_at FROM tasks"
            " WHERE position <= 4 AND full_name LIKE '+t%'"
        )
    )
    conn.execute(
        text(
            "INSERT INTO task_log_chunks (task_id, lease_token, byte_offset, size_bytes,"
            " compressed, data) SELECT task_id, 1, 0, 5, false, 'hello' FROM task_logs"
            " WHERE task_id % 2 = 0"
        )
    )


def add_live_fan_out(conn: Connection, project_id: int, definition_id: int) -> int:
    """An old session whose attempt still runs 2,000 tasks, queued and running."""
    run = add_run(
        conn,
        project_id,
        definition_id,
        NOW - 150 * DAY,
        state=AttemptState.RUNNING,
        workflow="live",
    )
    conn.execute(
        text(
            "INSERT INTO tasks (attempt_id, full_name, position, is_group, is_generated, state,"
            " config, retry_count, lease_token, lost_count, created_at, updated_at)"
            " SELECT :a, '+wf+fan' || g, g, false, false,"
            " CASE WHEN g % 2 = 0 THEN 'running' ELSE 'queued' END, '{}', 0, 1, 0, :now, :now"
            " FROM generate_series(1, :n) g"
        ),
        {"a": run.attempt_id, "n": LIVE_TASKS, "now": NOW},
    )
    return run.attempt_id


def test_a_million_rows_go_while_a_live_fan_out_and_newer_history_stay(pg: Engine) -> None:
    # Given a large old history, a live 2,000-task attempt, newer sessions, and a newer
    # attempt resuming an old one
    with pg.begin() as conn:
        project_id = add_project(conn)
        definition_id = add_revision(conn, project_id, "r1")
        seed_old_history(conn, project_id, definition_id)
        live_attempt = add_live_fan_out(conn, project_id, definition_id)
        resumed = add_run(conn, project_id, definition_id, NOW - 120 * DAY, workflow="old2")
        add_run(
            conn,
            project_id,
            definition_id,
            NOW - DAY,
            workflow="old2",
            resume_from=resumed.attempt_id,
        )
        newer = [add_run(conn, project_id, definition_id, NOW - i * DAY) for i in range(1, 6)]
        conn.execute(text("ANALYZE"))
        before = count_rows(conn)
    assert sum(before.values()) > 800_000
    live_before = _live_tasks(pg, live_attempt)
    # When pruned in batches (larger than the scheduler's and without pauses, for speed:
    # bench/prune.py measures the speed, this spec what goes and what stays)
    started = time.monotonic()
    result = prune_history(pg, RetentionPolicy(90 * DAY, 90 * DAY, 10), NOW, limits=FAST)
    elapsed = time.monotonic() - started
    # Then every old session but the newest of its workflow went, with all its rows
    assert result.removed["sessions"] == OLD_SESSIONS - 1
    assert result.removed["tasks"] == (OLD_SESSIONS - 1) * TASKS_PER_ATTEMPT
    assert result.total > 790_000
    # And nothing live, newer or resumed was touched
    assert _live_tasks(pg, live_attempt) == live_before == LIVE_TASKS + 3
    with pg.connect() as conn:
        kept = set(conn.execute(select(sessions.c.id)).scalars())
    assert {run.session_id for run in newer} | {resumed.session_id} <= kept
    # And a second prune removes nothing
    assert prune_history(pg, RetentionPolicy(), NOW, limits=FAST).total == 0
    print(f"pruned {result.total} rows in {elapsed:.1f}s")


def _live_tasks(engine: Engine, attempt_id: int) -> int:
    with engine.connect() as conn:
        query = select(func.count()).select_from(tasks).where(tasks.c.attempt_id == attempt_id)
        assert (
            conn.execute(select(attempts.c.state).where(attempts.c.id == attempt_id)).scalar_one()
            == AttemptState.RUNNING.value
        )
        return int(conn.execute(query).scalar_one())
