"""Specifications of the history queries: sessions with their last attempt, attempts, task
trees and log files."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text

from tests.api._seed import NOW, THREE_STEPS, add_project, add_sessions, set_state
from tickwork.shared.domain.states import AttemptState
from tickwork.shared.errors import NotFound
from tickwork.shared.store import history
from tickwork.shared.store import tasks as task_store
from tickwork.shared.store.logs import list_run_logs
from tickwork.shared.store.sessions import insert_attempt
from tickwork.shared.store.tables import task_logs, tasks


@pytest.fixture
def project(engine: Engine) -> int:
    with engine.begin() as conn:
        add_project(conn, "other", {"steps": THREE_STEPS})
        return add_project(conn, "etl", {"steps": THREE_STEPS, "more": THREE_STEPS})


class TestListSessions:
    def test_pages_walk_every_session_newest_first_without_gaps(
        self, engine: Engine, project: int
    ) -> None:
        ids = add_sessions(engine, project, "steps", 7)
        seen: list[int] = []
        after = None
        with engine.connect() as conn:
            while True:
                page = history.list_sessions(conn, after=after, limit=3)
                seen += [s.id for s in page.items]
                if page.next_after is None:
                    break
                after = page.next_after
        assert seen == sorted(ids, reverse=True)

    def test_each_session_comes_with_its_latest_attempt(self, engine: Engine, project: int) -> None:
        (session_id,) = add_sessions(engine, project, "steps", 1, state=AttemptState.ERROR)
        with engine.begin() as conn:
            newer = insert_attempt(
                conn,
                session_id=session_id,
                name="retry-1",
                workflow_definition_id=1,
                timezone="UTC",
                params={},
                now=NOW,
            )
        with engine.connect() as conn:
            (found,) = history.list_sessions(conn).items
        assert found.last_attempt is not None
        assert found.last_attempt.id == newer
        assert found.last_attempt.state is AttemptState.CREATED
        assert found.project_name == "etl"

    def test_a_listed_session_s_times_are_aware_utc(self, engine: Engine, project: int) -> None:
        # Given a session whose attempt has ended
        (session_id,) = add_sessions(engine, project, "steps", 1, state=AttemptState.SUCCESS)
        with engine.connect() as conn:
            # When it is listed and read alone
            listed = history.list_sessions(conn).items[0]
            alone = history.get_session(conn, session_id)
        # Then each of its times and its attempt's is an aware datetime in UTC
        for found in (listed, alone):
            assert found.last_attempt is not None
            times = [
                found.session_time,
                found.created_at,
                found.last_attempt.session_time,
                found.last_attempt.created_at,
                found.last_attempt.finished_at,
            ]
            assert all(t is not None and t.utcoffset() == timedelta(0) for t in times), times
            assert found.session_time == NOW and found.created_at == NOW

    def test_a_session_s_latest_attempt_reads_as_the_attempt_itself(
        self, engine: Engine, project: int
    ) -> None:
        # Given sessions, one of them without an attempt
        ids = add_sessions(engine, project, "more", 3, state=AttemptState.SUCCESS)
        with engine.begin() as conn:
            conn.execute(text("DELETE FROM attempts WHERE session_id = :id"), {"id": ids[0]})
        with engine.connect() as conn:
            # When the sessions are listed and one is read alone
            listed = {s.id: s for s in history.list_sessions(conn).items}
            alone = history.get_session(conn, ids[1])
            # Then every field of a latest attempt is the attempt's own, read by its id
            for session in listed.values():
                if session.last_attempt is not None:
                    own = history.get_attempt_view(conn, session.last_attempt.id)
                    assert session.last_attempt == own
        assert listed[ids[0]].last_attempt is None
        assert listed[ids[1]] == alone

    def test_filters_by_project_workflow_state_of_the_last_attempt_and_time(
        self, engine: Engine, project: int
    ) -> None:
        steps = add_sessions(engine, project, "steps", 4)
        more = add_sessions(engine, project, "more", 2, state=AttemptState.ERROR)
        with engine.connect() as conn:

            def ids(**filters: object) -> list[int]:
                page = history.list_sessions(conn, **filters)  # type: ignore[arg-type]
                return [s.id for s in page.items]

            assert ids(project="etl", workflow="more") == more[::-1]
            assert ids(state=AttemptState.ERROR) == more[::-1]
            assert ids(project="other") == []
            assert ids(project="nope") == []
            window = {"time_from": NOW + timedelta(hours=1), "time_to": NOW + timedelta(hours=3)}
            assert ids(workflow="steps", **window) == steps[1:3][::-1]

    def test_a_state_filter_matches_the_latest_attempt_only_and_pages_newest_first(
        self, engine: Engine, project: int
    ) -> None:
        failed = add_sessions(engine, project, "steps", 5, state=AttemptState.ERROR)
        retried = failed[1]
        with engine.begin() as conn:
            insert_attempt(
                conn,
                session_id=retried,
                name="retry-1",
                workflow_definition_id=1,
                timezone="UTC",
                params={},
                now=NOW,
            )
        with engine.connect() as conn:
            first = history.list_sessions(conn, state=AttemptState.ERROR, limit=2)
            rest = history.list_sessions(
                conn, state=AttemptState.ERROR, after=first.next_after, limit=10
            )
            created = history.list_sessions(conn, state=AttemptState.CREATED)
        still_failed = [s for s in failed if s != retried][::-1]
        assert [s.id for s in first.items + rest.items] == still_failed
        assert rest.next_after is None
        assert [s.id for s in created.items] == [retried]
        assert created.items[0].last_attempt is not None
        assert created.items[0].last_attempt.name == "retry-1"

    def test_an_unknown_session_is_not_found(self, engine: Engine) -> None:
        with engine.connect() as conn, pytest.raises(NotFound, match="no session 5"):
            history.get_session(conn, 5)


class TestAttempts:
    def test_attempts_are_listed_newest_first_with_project_and_workflow_names(
        self, engine: Engine, project: int
    ) -> None:
        add_sessions(engine, project, "steps", 3)
        with engine.connect() as conn:
            page = history.list_attempts(conn, limit=2)
            rest = history.list_attempts(conn, limit=2, after=page.next_after)
        assert [a.id for a in page.items + rest.items] == [3, 2, 1]
        assert rest.next_after is None
        assert page.items[0].project_name == "etl"
        assert page.items[0].workflow_name == "steps"

    def test_attempts_filter_by_state(self, engine: Engine, project: int) -> None:
        add_sessions(engine, project, "steps", 3)
        with engine.begin() as conn:
            set_state(conn, 2, AttemptState.KILLED)
            page = history.list_attempts(conn, state=AttemptState.KILLED)
        assert [a.id for a in page.items] == [2]

    def test_attempts_of_a_rare_project_and_of_a_common_one_page_alike(
        self, engine: Engine, project: int, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # Given few sessions of "more" and more sessions of "steps" than are read by id
        more = add_sessions(engine, project, "more", 3)
        steps = add_sessions(engine, project, "steps", 6)
        monkeypatch.setattr(history, "FEW_SESSIONS", 4)
        history._matching_sessions_statement.cache_clear()
        try:
            for name, expected in (("MOR", more), ("TEP", steps)):
                filters = history.RunFilters(workflow_contains=name)
                seen: list[int] = []
                after = None
                with engine.connect() as conn:
                    while True:
                        page = history.list_attempts(conn, where=filters, after=after, limit=2)
                        seen += [attempt.session_id for attempt in page.items]
                        if page.next_after is None:
                            break
                        after = page.next_after
                # Then both read newest first, every attempt once
                assert seen == sorted(expected, reverse=True)
        finally:
            history._matching_sessions_statement.cache_clear()

    def test_an_unknown_attempt_is_not_found(self, engine: Engine) -> None:
        with engine.connect() as conn, pytest.raises(NotFound, match="no attempt 9"):
            history.get_attempt_view(conn, 9)


class TestTasksAndLogs:
    def test_the_task_tree_gives_each_task_its_upstreams(
        self, engine: Engine, project: int
    ) -> None:
        add_sessions(engine, project, "steps", 1)
        with engine.begin() as conn:
            rows = [
                {"attempt_id": 1, "parent_id": None, "full_name": "+steps", "position": 0},
                {"attempt_id": 1, "parent_id": 1, "full_name": "+steps+a", "position": 0},
                {"attempt_id": 1, "parent_id": 1, "full_name": "+steps+b", "position": 1},
            ]
            for row in rows:
                conn.execute(
                    tasks.insert(),
                    {
                        **row,
                        "is_group": False,
                        "is_generated": False,
                        "state": "success",
                        "config": {},
                        "created_at": NOW,
                        "updated_at": NOW,
                    },
                )
            conn.execute(text("INSERT INTO task_dependencies VALUES (2, 3)"))
            conn.execute(
                task_logs.insert(),
                [
                    {
                        "task_id": 2,
                        "attempt_id": 1,
                        "lease_token": 1,
                        "path": "1/a.2.1.log",
                        "size_bytes": 3,
                        "created_at": NOW,
                    },
                    {
                        "task_id": 3,
                        "attempt_id": 1,
                        "lease_token": 1,
                        "path": "1/b.3.1.log",
                        "size_bytes": 4,
                        "created_at": NOW,
                    },
                ],
            )
        with engine.connect() as conn:
            tree = history.list_task_tree(conn, 1)
            files = list_run_logs(conn, 1, task_prefix="+steps+b")
        assert [(n.task.full_name, n.upstream_ids) for n in tree] == [
            ("+steps", []),
            ("+steps+a", []),
            ("+steps+b", [2]),
        ]
        assert [(f.task_full_name, f.path) for f in files] == [("+steps+b", "1/b.3.1.log")]

    def test_a_run_is_listed_from_its_dispatch_and_its_result_ends_it(
        self, engine: Engine, project: int
    ) -> None:
        # Given two runs of a task indexed when dispatched, the first twice (published again)
        add_sessions(engine, project, "steps", 1)
        run = {"task_id": 1, "attempt_id": 1, "path": "1/a.1.1.log", "created_at": NOW}
        later = NOW + timedelta(minutes=1)
        with engine.begin() as conn:
            conn.execute(
                tasks.insert(),
                {
                    "attempt_id": 1,
                    "parent_id": None,
                    "full_name": "+steps+a",
                    "position": 0,
                    "is_group": False,
                    "is_generated": False,
                    "state": "running",
                    "config": {},
                    "created_at": NOW,
                    "updated_at": NOW,
                },
            )
            task_store.write_task_logs(conn, [{**run, "lease_token": 1}], [])
            task_store.write_task_logs(
                conn,
                [{**run, "lease_token": 1}, {**run, "lease_token": 2, "path": "1/a.1.2.log"}],
                [],
            )
            # When the second run's result records its file
            result = {**run, "lease_token": 2, "path": "1/a.1.2.log", "created_at": later}
            ended = {**result, "size_bytes": 9, "truncated_bytes": 4}
            task_store.write_task_logs(conn, [], [ended])
            # And (a message published again late) indexed once more beside a new run
            task_store.write_task_logs(
                conn,
                [{**run, "lease_token": 2, "path": "1/a.1.2.log"}],
                [{**run, "lease_token": 3, "size_bytes": 5}],
            )
        with engine.connect() as conn:
            files = list_run_logs(conn, 1)
        # Then each run is listed once, in dispatch order; the second one's end stays
        assert [
            (f.lease_token, f.size_bytes, f.truncated_bytes, f.created_at, f.ended_at)
            for f in files
        ] == [(1, 0, 0, NOW, None), (2, 9, 4, NOW, later), (3, 5, 0, NOW, NOW)]


@pytest.mark.slow
def test_a_deep_filtered_page_of_100000_sessions_is_fast(
    migrated_postgres_url: str, tmp_path: Path
) -> None:
    # Given 100,000 sessions of one workflow, each with an attempt (every 10th failed)
    engine = create_engine(migrated_postgres_url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.begin() as conn:
        project_id = add_project(conn, "big", {"steps": THREE_STEPS})
        conn.execute(
            text(
                "INSERT INTO sessions (project_id, workflow_name, session_time, session_uuid,"
                " created_at) SELECT :p, 'steps', now() - make_interval(hours => g),"
                " md5(g::text), now() FROM generate_series(1, 100000) g"
            ),
            {"p": project_id},
        )
        conn.execute(
            text(
                "INSERT INTO attempts (session_id, name, workflow_definition_id, state, timezone,"
                " params, created_at) SELECT id, 'scheduled', 1, CASE WHEN id % 10 = 0 THEN"
                " 'error' ELSE 'success' END, 'UTC', '{}', now() FROM sessions"
            )
        )
        conn.execute(text("ANALYZE"))
    with engine.connect() as conn:
        # When a page deep in the list is read, filtered by the last attempt's state
        started = time.perf_counter()
        page = history.list_sessions(
            conn,
            project="big",
            workflow="steps",
            state=AttemptState.ERROR,
            after=50_001,
            limit=100,
        )
        seconds = time.perf_counter() - started
    engine.dispose()
    # Then it holds the right rows, quickly
    assert [s.id for s in page.items] == list(range(50_000, 49_000, -10))
    assert all(s.last_attempt and s.last_attempt.state is AttemptState.ERROR for s in page.items)
    assert seconds < 1.0
