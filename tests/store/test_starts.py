"""Specifications of starting, retrying and killing attempts in the store."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, select

from tests.api._seed import NOW, THREE_STEPS, add_project, delete_project, set_state
from tickwork.shared.domain.states import AttemptState, TaskState
from tickwork.shared.errors import Conflict, InvalidInput, NotFound
from tickwork.shared.store.sessions import AttemptRow, get_attempt
from tickwork.shared.store.starts import (
    RetryMode,
    StartResult,
    kill_attempt,
    resumed_before,
    retry_attempt,
    start_attempt,
)
from tickwork.shared.store.tables import attempts, sessions, task_dependencies, tasks

DAILY = """
    timezone: Asia/Tokyo
    schedule:
      daily>: "07:00:00"
    +only:
      echo>: hi
"""


def start(engine: Engine, **overrides: object) -> StartResult:
    values: dict[str, object] = {
        "project": "etl",
        "workflow": "steps",
        "session_time": None,
        "params": {},
        "idempotency_key": None,
        "now": NOW,
    }
    values.update(overrides)
    with engine.begin() as conn:
        return start_attempt(conn, **values)  # type: ignore[arg-type]


def attempt_of(engine: Engine, result: StartResult) -> AttemptRow:
    with engine.connect() as conn:
        return get_attempt(conn, result.attempt_id)


@pytest.fixture
def project(engine: Engine) -> int:
    with engine.begin() as conn:
        return add_project(
            conn,
            "etl",
            {"steps": THREE_STEPS, "daily": DAILY},
            default_params={"region": "eu", "db": {"host": "a", "port": 1}},
        )


class TestStartAttempt:
    def test_a_start_creates_a_session_and_an_attempt_in_state_created(
        self, engine: Engine, project: int
    ) -> None:
        result = start(engine, session_time=datetime(2026, 1, 1, tzinfo=UTC))
        assert result.created
        attempt = attempt_of(engine, result)
        assert attempt.state is AttemptState.CREATED
        assert attempt.session_time == datetime(2026, 1, 1, tzinfo=UTC)
        assert attempt.session_id == result.session_id

    def test_the_params_merge_the_revisions_defaults_under_the_requests(
        self, engine: Engine, project: int
    ) -> None:
        result = start(engine, params={"db": {"port": 2}, "day": "mon"})
        params = attempt_of(engine, result).params
        assert params == {"region": "eu", "db": {"host": "a", "port": 2}, "day": "mon"}

    def test_the_same_session_time_again_names_the_existing_attempt(
        self, engine: Engine, project: int
    ) -> None:
        first = start(engine, session_time=datetime(2026, 1, 1, tzinfo=UTC))
        again = start(engine, session_time=datetime(2026, 1, 1, tzinfo=UTC))
        assert again == StartResult(first.attempt_id, first.session_id, created=False)

    def test_an_idempotency_key_used_again_names_its_attempt_whatever_the_time(
        self, engine: Engine, project: int
    ) -> None:
        first = start(engine, session_time=datetime(2026, 1, 1, tzinfo=UTC), idempotency_key="k")
        again = start(engine, session_time=datetime(2026, 2, 1, tzinfo=UTC), idempotency_key="k")
        assert again == StartResult(first.attempt_id, first.session_id, created=False)
        with engine.connect() as conn:
            assert conn.execute(select(sessions.c.id)).all() == [(first.session_id,)]

    def test_a_naive_session_time_is_read_in_the_workflows_time_zone(
        self, engine: Engine, project: int
    ) -> None:
        result = start(engine, workflow="daily", session_time=datetime(2026, 1, 1, 7, 0))
        attempt = attempt_of(engine, result)
        assert attempt.session_time == datetime(2025, 12, 31, 22, 0, tzinfo=UTC)

    def test_a_naive_session_time_before_year_1_in_utc_is_refused_naming_it(
        self, engine: Engine, project: int
    ) -> None:
        # 0001-01-01 00:00 in Tokyo is 9 hours before the first time UTC can hold
        with pytest.raises(InvalidInput) as refused:
            start(engine, workflow="daily", session_time=datetime(1, 1, 1))
        assert refused.value.problems[0].file == "/session_time"
        with engine.connect() as conn:
            assert conn.execute(select(sessions.c.id)).first() is None

    def test_the_default_session_time_of_a_scheduled_workflow_is_its_last_scheduled_time(
        self, engine: Engine, project: int
    ) -> None:
        # NOW is 17:00 on Nov 30 in Tokyo: daily> runs at 07:00 for the session of that
        # day's midnight, 15:00 UTC the day before.
        result = start(engine, workflow="daily")
        attempt = attempt_of(engine, result)
        assert attempt.session_time == datetime(2026, 11, 29, 15, 0, tzinfo=UTC)

    def test_the_default_session_time_of_an_unscheduled_workflow_is_now(
        self, engine: Engine, project: int
    ) -> None:
        result = start(engine, now=NOW.replace(microsecond=1234))
        assert attempt_of(engine, result).session_time == NOW

    def test_the_latest_revision_is_used(self, engine: Engine, project: int) -> None:
        with engine.begin() as conn:
            add_project(conn, "etl", {"steps": THREE_STEPS}, revision="r2")
        with pytest.raises(NotFound, match="no workflow 'daily' in project 'etl'"):
            start(engine, workflow="daily")

    def test_an_unknown_project_or_workflow_is_not_found_by_name(
        self, engine: Engine, project: int
    ) -> None:
        with pytest.raises(NotFound, match="no project 'nope'"):
            start(engine, project="nope")
        with pytest.raises(NotFound, match="no workflow 'nope' in project 'etl'"):
            start(engine, workflow="nope")
        with engine.connect() as conn:
            assert conn.execute(select(attempts.c.id)).all() == []

    def test_a_deleted_project_is_not_found(self, engine: Engine, project: int) -> None:
        with engine.begin() as conn:
            delete_project(conn, "etl")
        with pytest.raises(NotFound, match="no project 'etl'"):
            start(engine)


def ended(engine: Engine, attempt_id: int, state: AttemptState) -> None:
    with engine.begin() as conn:
        set_state(conn, attempt_id, state)


class TestRetryAttempt:
    def test_a_retry_is_a_new_attempt_of_the_same_session(
        self, engine: Engine, project: int
    ) -> None:
        first = start(engine, params={"a": 1})
        ended(engine, first.attempt_id, AttemptState.ERROR)
        with engine.begin() as conn:
            new_id = retry_attempt(
                conn,
                first.attempt_id,
                mode=RetryMode.ALL,
                from_task=None,
                params={"b": 2},
                now=NOW,
            )
            retried = get_attempt(conn, new_id)
        assert retried.session_id == first.session_id
        assert retried.name == "retry-1"
        assert retried.resume_from_attempt_id is None
        assert retried.params == {"region": "eu", "db": {"host": "a", "port": 1}, "a": 1, "b": 2}

    def test_a_retry_of_failed_tasks_resumes_the_old_attempt(
        self, engine: Engine, project: int
    ) -> None:
        first = start(engine)
        ended(engine, first.attempt_id, AttemptState.ERROR)
        with engine.begin() as conn:
            new_id = retry_attempt(
                conn,
                first.attempt_id,
                mode=RetryMode.FAILED,
                from_task=None,
                params=None,
                now=NOW,
            )
            assert get_attempt(conn, new_id).resume_from_attempt_id == first.attempt_id

    def test_retrying_failed_tasks_of_an_attempt_that_succeeded_is_refused(
        self, engine: Engine, project: int
    ) -> None:
        first = start(engine)
        ended(engine, first.attempt_id, AttemptState.SUCCESS)
        with engine.begin() as conn, pytest.raises(Conflict, match="succeeded"):
            retry_attempt(
                conn,
                first.attempt_id,
                mode=RetryMode.FAILED,
                from_task=None,
                params=None,
                now=NOW,
            )

    def test_a_retry_while_the_latest_attempt_runs_is_a_conflict_naming_it(
        self, engine: Engine, project: int
    ) -> None:
        first = start(engine)
        with engine.begin() as conn, pytest.raises(Conflict) as caught:
            retry_attempt(
                conn,
                first.attempt_id,
                mode=RetryMode.ALL,
                from_task=None,
                params=None,
                now=NOW,
            )
        assert caught.value.attempt_id == str(first.attempt_id)

    def test_a_retry_of_an_unknown_attempt_is_not_found(self, engine: Engine) -> None:
        with engine.begin() as conn, pytest.raises(NotFound, match="no attempt 99"):
            retry_attempt(conn, 99, mode=RetryMode.ALL, from_task=None, params=None, now=NOW)


def add_tasks(
    engine: Engine,
    attempt_id: int,
    tree: list[tuple[str, str | None, TaskState]],
    edges: list[tuple[str, str]],
) -> None:
    """Task rows ``(full name, parent full name, state)`` and ``(upstream, downstream)``."""
    ids: dict[str, int] = {}
    with engine.begin() as conn:
        for position, (name, parent, state) in enumerate(tree):
            ids[name] = conn.execute(
                tasks.insert().returning(tasks.c.id),
                {
                    "attempt_id": attempt_id,
                    "parent_id": ids.get(parent or ""),
                    "full_name": name,
                    "position": position,
                    "is_group": False,
                    "is_generated": False,
                    "state": state.value,
                    "config": {},
                    "created_at": NOW,
                    "updated_at": NOW,
                },
            ).scalar_one()
        for up, down in edges:
            conn.execute(
                task_dependencies.insert(), {"upstream_id": ids[up], "downstream_id": ids[down]}
            )


class TestResumedBefore:
    def test_the_upstreams_of_the_task_and_of_its_ancestors_with_their_children_count_as_done(
        self, engine: Engine, project: int
    ) -> None:
        first = start(engine)
        ok, failed = TaskState.SUCCESS, TaskState.ERROR
        add_tasks(
            engine,
            first.attempt_id,
            [
                ("+wf", None, failed),
                ("+wf+a", "+wf", ok),
                ("+wf+a+x", "+wf+a", ok),
                ("+wf+b", "+wf", ok),
                ("+wf+b+p", "+wf+b", ok),
                ("+wf+b+q", "+wf+b", ok),
                ("+wf+b+r", "+wf+b", failed),
                ("+wf+c", "+wf", TaskState.CANCELED),
            ],
            [
                ("+wf+a", "+wf+b"),
                ("+wf+b", "+wf+c"),
                ("+wf+b+p", "+wf+b+q"),
                ("+wf+b+q", "+wf+b+r"),
            ],
        )
        with engine.connect() as conn:
            assert resumed_before(conn, first.attempt_id, "+wf+b+q") == [
                "+wf+a",
                "+wf+a+x",
                "+wf+b+p",
            ]
            # A unique end of a full name is enough.
            assert resumed_before(conn, first.attempt_id, "+c") == [
                "+wf+a",
                "+wf+a+x",
                "+wf+b",
                "+wf+b+p",
                "+wf+b+q",
            ]

    def test_an_unknown_task_is_refused_naming_from(self, engine: Engine, project: int) -> None:
        first = start(engine)
        add_tasks(engine, first.attempt_id, [("+wf", None, TaskState.SUCCESS)], [])
        with engine.connect() as conn, pytest.raises(InvalidInput) as caught:
            resumed_before(conn, first.attempt_id, "+nope")
        assert caught.value.problems[0].file == "/from"
        assert "+nope" in caught.value.problems[0].message


class TestKillAttempt:
    def test_a_kill_moves_a_running_attempt_to_canceling(
        self, engine: Engine, project: int
    ) -> None:
        first = start(engine)
        with engine.begin() as conn:
            assert kill_attempt(conn, first.attempt_id, NOW) is AttemptState.CANCELING
            assert kill_attempt(conn, first.attempt_id, NOW) is AttemptState.CANCELING

    def test_a_kill_of_an_attempt_that_ended_is_a_conflict(
        self, engine: Engine, project: int
    ) -> None:
        first = start(engine)
        ended(engine, first.attempt_id, AttemptState.SUCCESS)
        with engine.begin() as conn, pytest.raises(Conflict, match="already ended"):
            kill_attempt(conn, first.attempt_id, NOW)

    def test_a_kill_of_an_unknown_attempt_is_not_found(self, engine: Engine) -> None:
        with engine.begin() as conn, pytest.raises(NotFound):
            kill_attempt(conn, 42, NOW)
