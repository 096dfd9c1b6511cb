"""Specifications of the store on SQLite and PostgreSQL: schema, idempotent keys, task rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, func, inspect, select
from sqlalchemy.exc import StatementError

from tickwork.shared.domain.states import AttemptState, TaskState
from tickwork.shared.domain.workflow import TaskSpec, WorkflowDefinition
from tickwork.shared.store import logs as log_store
from tickwork.shared.store import projects as project_store
from tickwork.shared.store import sessions as session_store
from tickwork.shared.store import tasks as task_store
from tickwork.shared.store.engine import create_store_engine
from tickwork.shared.store.migrate import (
    current_revision,
    head_revision,
    is_up_to_date,
    upgrade_database,
)
from tickwork.shared.store.tables import (
    metadata,
    projects,
    task_dependencies,
    task_log_chunks,
    task_logs,
    workflow_configs,
)

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
TOKYO = timezone(timedelta(hours=9))


def _definition(command: str = "hello", name: str = "wf") -> WorkflowDefinition:
    root = TaskSpec(f"+{name}", children=(TaskSpec("+a", operator="echo", command=command),))
    return WorkflowDefinition(name, root)


def _attempt(conn: Connection, session_time: datetime = NOW, name: str = "run-1") -> int:
    project_id = project_store.ensure_project(conn, "proj", NOW)
    revision_id = project_store.ensure_revision(conn, project_id, "r1", {}, NOW)
    definition_id = project_store.ensure_workflow_definition(conn, revision_id, _definition())
    session_id = session_store.ensure_session(
        conn, project_id=project_id, workflow_name="wf", session_time=session_time, now=NOW
    )
    attempt_id = session_store.insert_attempt(
        conn,
        session_id=session_id,
        name=name,
        workflow_definition_id=definition_id,
        timezone="UTC",
        params={},
        now=NOW,
    )
    assert attempt_id is not None
    return attempt_id


def _row(attempt_id: int, full_name: str, **values: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "attempt_id": attempt_id,
        "parent_id": None,
        "full_name": full_name,
        "position": 0,
        "is_group": False,
        "is_generated": False,
        "state": TaskState.BLOCKED.value,
        "config": {"name": full_name},
        "inherited_export": None,
        "retry_count": 0,
        "lease_token": 0,
        "not_before": None,
        "params": None,
        "result": None,
        "output_params": None,
        "error": None,
        "created_at": NOW,
        "started_at": None,
        "finished_at": None,
        "updated_at": NOW,
    }
    row.update(values)
    if isinstance(row["state"], TaskState):
        row["state"] = row["state"].value
    return row


def _chunk_text(conn: Connection, task_id: int, token: int) -> bytes:
    """The stored chunks of a run, joined (short ones are stored uncompressed)."""
    query = (
        select(task_log_chunks.c.data)
        .where(task_log_chunks.c.task_id == task_id, task_log_chunks.c.lease_token == token)
        .order_by(task_log_chunks.c.byte_offset)
    )
    return b"".join(bytes(data) for data in conn.execute(query).scalars())


def _insert(conn: Connection, attempt_id: int, full_name: str, **values: Any) -> int:
    (task_id,) = task_store.insert_tasks(conn, [_row(attempt_id, full_name, **values)])
    return task_id


class TestMigrations:
    def test_upgrade_creates_every_table_and_reaches_head(self, database_url: str) -> None:
        engine = create_store_engine(database_url)
        try:
            assert current_revision(engine) is None
            assert not is_up_to_date(engine)
            upgrade_database(engine)
            assert set(metadata.tables) <= set(inspect(engine).get_table_names())
            assert current_revision(engine) == head_revision()
            assert is_up_to_date(engine)
        finally:
            engine.dispose()

    def test_upgrade_is_idempotent_and_keeps_data(self, engine: Engine) -> None:
        with engine.begin() as conn:
            project_id = project_store.ensure_project(conn, "kept", NOW)
        upgrade_database(engine)
        upgrade_database(engine)
        assert is_up_to_date(engine)
        with engine.begin() as conn:
            assert project_store.ensure_project(conn, "kept", NOW) == project_id


class TestProjects:
    def test_two_local_directories_with_one_name_are_two_projects(
        self, engine: Engine, tmp_path: Path
    ) -> None:
        first, second = tmp_path / "a" / "etl", tmp_path / "b" / "etl"
        with engine.begin() as conn:
            first_id = project_store.ensure_local_project(conn, first, NOW)
            second_id = project_store.ensure_local_project(conn, second, NOW)
            assert first_id != second_id
            assert project_store.ensure_local_project(conn, first, NOW) == first_id
            assert project_store.ensure_local_project(conn, second, NOW) == second_id
            names = conn.execute(select(projects.c.name).order_by(projects.c.id)).scalars()
            assert [n.split("-")[0] for n in names] == ["etl", "etl"]

    def test_ensure_project_and_revision_are_idempotent(self, engine: Engine) -> None:
        with engine.begin() as conn:
            project_id = project_store.ensure_project(conn, "p", NOW)
            assert project_store.ensure_project(conn, "p", NOW + timedelta(1)) == project_id
            assert project_store.ensure_project(conn, "q", NOW) != project_id
            revision_id = project_store.ensure_revision(conn, project_id, "r1", {"a": 1}, NOW)
            assert project_store.ensure_revision(conn, project_id, "r1", {}, NOW) == revision_id
            assert project_store.ensure_revision(conn, project_id, "r2", {}, NOW) != revision_id

    def test_ensure_workflow_definition_is_idempotent(self, engine: Engine) -> None:
        with engine.begin() as conn:
            project_id = project_store.ensure_project(conn, "p", NOW)
            revision_id = project_store.ensure_revision(conn, project_id, "r1", {}, NOW)
            first = project_store.ensure_workflow_definition(conn, revision_id, _definition())
            again = project_store.ensure_workflow_definition(conn, revision_id, _definition())
            assert again == first
            assert project_store.load_workflow_definition(conn, first) == _definition()

    def test_identical_configs_are_stored_once_by_digest(self, engine: Engine) -> None:
        with engine.begin() as conn:
            project_id = project_store.ensure_project(conn, "p", NOW)
            r1 = project_store.ensure_revision(conn, project_id, "r1", {}, NOW)
            r2 = project_store.ensure_revision(conn, project_id, "r2", {}, NOW)
            d1 = project_store.ensure_workflow_definition(conn, r1, _definition())
            d2 = project_store.ensure_workflow_definition(conn, r2, _definition())
            assert d1 != d2
            assert conn.execute(select(func.count()).select_from(workflow_configs)).scalar() == 1
            d3 = project_store.ensure_workflow_definition(conn, r2, _definition("other", "wf2"))
            assert conn.execute(select(func.count()).select_from(workflow_configs)).scalar() == 2
            assert project_store.load_workflow_definition(conn, d3) == _definition("other", "wf2")

    def test_the_digest_does_not_depend_on_key_order(self) -> None:
        assert project_store.config_digest({"a": 1, "b": [1, 2]}) == project_store.config_digest(
            {"b": [1, 2], "a": 1}
        )
        assert project_store.config_digest({"a": 1}) != project_store.config_digest({"a": 2})


class TestSessions:
    def _ensure(self, conn: Connection, session_time: datetime, workflow: str = "wf") -> int:
        project_id = project_store.ensure_project(conn, "p", NOW)
        return session_store.ensure_session(
            conn, project_id=project_id, workflow_name=workflow, session_time=session_time, now=NOW
        )

    def test_the_same_project_workflow_and_time_is_one_session(self, engine: Engine) -> None:
        with engine.begin() as conn:
            first = self._ensure(conn, NOW)
        with engine.begin() as conn:
            assert self._ensure(conn, NOW) == first
            # The same instant written in another zone is the same session time
            assert self._ensure(conn, NOW.astimezone(TOKYO)) == first

    def test_another_time_or_workflow_is_another_session(self, engine: Engine) -> None:
        with engine.begin() as conn:
            first = self._ensure(conn, NOW)
            assert self._ensure(conn, NOW + timedelta(hours=1)) != first
            assert self._ensure(conn, NOW, workflow="other") != first

    def test_a_duplicate_attempt_name_in_a_session_is_not_inserted(self, engine: Engine) -> None:
        with engine.begin() as conn:
            attempt_id = _attempt(conn)
            session_id = session_store.get_attempt(conn, attempt_id).session_id
            values: dict[str, Any] = {
                "session_id": session_id,
                "workflow_definition_id": session_store.get_attempt(
                    conn, attempt_id
                ).workflow_definition_id,
                "timezone": "UTC",
                "params": {},
                "now": NOW,
            }
            assert session_store.insert_attempt(conn, name="run-1", **values) is None
            second = session_store.insert_attempt(conn, name="run-2", **values)
            assert second is not None
            names = [a.name for a in session_store.list_session_attempts(conn, session_id)]
            assert names == ["run-1", "run-2"]

    def test_timestamps_come_back_aware_utc(self, engine: Engine) -> None:
        session_time = datetime(2024, 5, 1, 9, 30, 15, 123456, tzinfo=TOKYO)
        with engine.begin() as conn:
            attempt_id = _attempt(conn, session_time)
        with engine.connect() as conn:
            attempt = session_store.get_attempt(conn, attempt_id)
        assert attempt.session_time.tzinfo is not None
        assert attempt.session_time.utcoffset() == timedelta(0)
        assert attempt.session_time == session_time
        assert attempt.session_time.hour == 0
        assert attempt.created_at == NOW
        assert attempt.created_at.utcoffset() == timedelta(0)

    def test_timestamps_come_back_in_utc_itself_whatever_zone_the_server_uses(
        self, migrated_database_url: str
    ) -> None:
        # Given a server whose sessions start in another zone (PostgreSQL's TimeZone)
        url = migrated_database_url
        if url.startswith("postgresql"):
            url += ("&" if "?" in url else "?") + "options=-c%20timezone%3DAsia/Tokyo"
        engine = create_store_engine(url)
        try:
            session_time = datetime(2024, 5, 1, 9, 30, 15, 123456, tzinfo=TOKYO)
            with engine.begin() as conn:
                attempt_id = _attempt(conn, session_time)
            # When the store reads the times back, then each is the same instant in UTC
            with engine.connect() as conn:
                attempt = session_store.get_attempt(conn, attempt_id)
        finally:
            engine.dispose()
        assert attempt.session_time == session_time and attempt.session_time.tzinfo is UTC
        assert attempt.created_at == NOW and attempt.created_at.tzinfo is UTC

    def test_a_naive_timestamp_is_refused(self, engine: Engine) -> None:
        with engine.begin() as conn, pytest.raises(StatementError, match="naive"):
            project_store.ensure_project(conn, "p", datetime(2024, 1, 1))

    def test_set_attempt_state_is_guarded(self, engine: Engine) -> None:
        with engine.begin() as conn:
            attempt_id = _attempt(conn)
            assert not session_store.set_attempt_state(
                conn, attempt_id, AttemptState.SUCCESS, NOW, from_states=(AttemptState.RUNNING,)
            )
            assert session_store.set_attempt_state(
                conn, attempt_id, AttemptState.RUNNING, NOW, from_states=(AttemptState.CREATED,)
            )
            later = NOW + timedelta(minutes=5)
            assert session_store.set_attempt_state(
                conn, attempt_id, AttemptState.ERROR, later, from_states=(AttemptState.RUNNING,)
            )
            attempt = session_store.get_attempt(conn, attempt_id)
        assert attempt.state is AttemptState.ERROR
        assert attempt.finished_at == later


class TestTaskRows:
    def test_each_queueing_takes_a_larger_lease_token(self, engine: Engine) -> None:
        with engine.begin() as conn:
            task_id = _insert(conn, _attempt(conn), "+wf", state=TaskState.READY)
            tokens = []
            for _ in range(3):
                queued = task_store.mark_tasks_queued(conn, {task_id: {"p": 1}}, NOW)
                tokens.append(queued[task_id])
                assert task_store.update_task(
                    conn, task_id, (TaskState.QUEUED,), state=TaskState.READY
                )
            task = task_store.get_task(conn, task_id)
        assert tokens == [1, 2, 3]
        assert task.lease_token == 3
        assert task.params == {"p": 1}
        assert task.started_at == NOW

    def test_only_ready_tasks_are_queued(self, engine: Engine) -> None:
        with engine.begin() as conn:
            attempt_id = _attempt(conn)
            ready = _insert(conn, attempt_id, "+a", state=TaskState.READY)
            blocked = _insert(conn, attempt_id, "+b", state=TaskState.BLOCKED, lease_token=4)
            tokens = task_store.mark_tasks_queued(conn, {ready: None, blocked: None}, NOW)
            assert tokens == {ready: 1}
            assert task_store.get_task(conn, blocked).lease_token == 4
            assert task_store.get_task(conn, blocked).state is TaskState.BLOCKED

    def test_queueing_indexes_the_logs_of_runs_it_starts_and_of_runs_that_ended(
        self, engine: Engine
    ) -> None:
        def row(task_id: int, token: int, **more: Any) -> dict[str, Any]:
            return {
                "task_id": task_id,
                "attempt_id": attempt_id,
                "lease_token": token,
                "path": f"{task_id}.{token}.log",
                "created_at": NOW,
                **more,
            }

        with engine.begin() as conn:
            attempt_id = _attempt(conn)
            ready = _insert(conn, attempt_id, "+a", state=TaskState.READY, lease_token=2)
            other = _insert(conn, attempt_id, "+b", state=TaskState.READY)
            done = _insert(conn, attempt_id, "+c", state=TaskState.SUCCESS, lease_token=5)
            logs = task_store.LogRows(
                # +b is guessed under a token it will not get: its row is left to the caller
                [row(ready, 3), row(other, 7)],
                [row(done, 5, size_bytes=12, truncated_bytes=0)],
            )
            tokens, left = task_store.mark_tasks_queued_logging(
                conn, {ready: None, other: None}, NOW, logs
            )
            written = {
                (r.task_id, r.lease_token): (r.size_bytes, r.ended_at)
                for r in conn.execute(select(task_logs))
            }
        assert tokens == {ready: 3, other: 1}
        if engine.dialect.name == "postgresql":  # in the queueing statement itself
            assert written == {(ready, 3): (0, None), (done, 5): (12, NOW)}
            assert left == task_store.LogRows([row(other, 7)], [])
        else:  # nothing written: every row is left to the caller
            assert written == {}
            assert left == logs

    def test_queueing_stores_the_log_chunks_the_pass_read_in_the_same_statement(
        self, engine: Engine
    ) -> None:
        with engine.begin() as conn:
            attempt_id = _attempt(conn)
            ready = _insert(conn, attempt_id, "+a", state=TaskState.READY)
            done = _insert(conn, attempt_id, "+b", state=TaskState.SUCCESS, lease_token=1)
            chunks = log_store.chunk_rows([log_store.LogChunk(done, 1, 0, b"done\n")])
            logs = task_store.LogRows([], [], chunks, [attempt_id])
            tokens, left = task_store.mark_tasks_queued_logging(conn, {ready: None}, NOW, logs)
            if engine.dialect.name == "postgresql":  # in the queueing statement itself
                assert left == task_store.LogRows([], [])
            else:  # nothing written: every row is left to the caller, who writes them
                assert left == logs
                log_store.write_chunk_rows(conn, left.chunks)
            text = _chunk_text(conn, done, 1)
        assert tokens == {ready: 1}
        assert text == b"done\n"

    def test_a_queueing_that_queues_nothing_still_stores_the_chunks(self, engine: Engine) -> None:
        with engine.begin() as conn:
            attempt_id = _attempt(conn)
            running = _insert(conn, attempt_id, "+a", state=TaskState.RUNNING, lease_token=3)
            chunks = log_store.chunk_rows([log_store.LogChunk(running, 3, 0, b"half")])
            logs = task_store.LogRows([], [], chunks, [attempt_id])
            tokens, left = task_store.mark_tasks_queued_logging(conn, {running: None}, NOW, logs)
            if engine.dialect.name == "postgresql":  # the statement stored them all the same
                assert left == task_store.LogRows([], [])
            else:  # every row is left to the caller, who writes them
                assert left == logs
                log_store.write_chunk_rows(conn, left.chunks)
            text = _chunk_text(conn, running, 3)
        assert tokens == {}
        assert text == b"half"

    def test_a_task_runs_only_under_its_current_token(self, engine: Engine) -> None:
        with engine.begin() as conn:
            task_id = _insert(conn, _attempt(conn), "+a", state=TaskState.QUEUED, lease_token=2)
            assert task_store.mark_tasks_running(conn, [(task_id, 1)], NOW) == {}
            assert task_store.get_task(conn, task_id).state is TaskState.QUEUED
            assert task_store.mark_tasks_running(conn, [(task_id, 2)], NOW) == {task_id: "+a"}
            assert task_store.mark_tasks_running(conn, [(task_id, 2)], NOW) == {}
            assert task_store.get_task(conn, task_id).state is TaskState.RUNNING

    def test_a_guarded_update_from_a_wrong_state_changes_nothing(self, engine: Engine) -> None:
        with engine.begin() as conn:
            task_id = _insert(conn, _attempt(conn), "+a", state=TaskState.BLOCKED)
            moved = task_store.update_task(
                conn,
                task_id,
                (TaskState.QUEUED, TaskState.RUNNING),
                state=TaskState.SUCCESS,
                output_params={"x": 1},
            )
            task = task_store.get_task(conn, task_id)
        assert not moved
        assert task.state is TaskState.BLOCKED
        assert task.output_params is None

    def test_update_tasks_state_moves_only_tasks_in_the_given_states(self, engine: Engine) -> None:
        with engine.begin() as conn:
            attempt_id = _attempt(conn)
            a = _insert(conn, attempt_id, "+a", state=TaskState.BLOCKED, is_group=True)
            b = _insert(conn, attempt_id, "+b", state=TaskState.SUCCESS)
            moved = task_store.update_tasks_state(
                conn, [a, b], (TaskState.BLOCKED,), TaskState.CANCELED, NOW
            )
            assert moved == [(a, True)]  # with whether it is a group
            assert task_store.get_task(conn, b).state is TaskState.SUCCESS

    def test_make_ready_returns_the_rows_it_moved_and_can_leave_delayed_tasks_alone(
        self, engine: Engine
    ) -> None:
        with engine.begin() as conn:
            attempt_id = _attempt(conn)
            plain = _insert(conn, attempt_id, "+a")
            delayed = _insert(conn, attempt_id, "+b", config={"name": "+b", "start": {"delay": 5}})
            moved = task_store.make_ready(
                conn, [plain, delayed], TaskState.BLOCKED, NOW, skip_delayed=True
            )
            assert moved == [task_store.get_task(conn, plain)]
            assert moved[0].state is TaskState.READY
            assert task_store.get_task(conn, delayed).state is TaskState.BLOCKED

    def test_a_fenced_update_applies_only_under_the_tasks_current_lease_token(
        self, engine: Engine
    ) -> None:
        with engine.begin() as conn:
            attempt_id = _attempt(conn)
            task_id = _insert(conn, attempt_id, "+t", state=TaskState.RUNNING, lease_token=2)
            running = (TaskState.RUNNING,)
            assert not task_store.update_task(conn, task_id, running, fence=1, state="success")
            assert task_store.get_task(conn, task_id).state is TaskState.RUNNING
            assert task_store.update_task(conn, task_id, running, fence=2, state="success")
            assert task_store.get_task(conn, task_id).state is TaskState.SUCCESS

    def test_a_task_is_startable_once_every_upstream_succeeded(self, engine: Engine) -> None:
        with engine.begin() as conn:
            attempt_id = _attempt(conn)
            up1 = _insert(conn, attempt_id, "+u1", state=TaskState.SUCCESS)
            up2 = _insert(conn, attempt_id, "+u2", state=TaskState.RUNNING)
            down = _insert(conn, attempt_id, "+d")
            task_store.insert_dependencies(conn, [(up1, down), (up2, down)])
            assert task_store.startable_downstream(conn, up1) == []
            task_store.update_task(conn, up2, (TaskState.RUNNING,), state=TaskState.SUCCESS)
            assert task_store.startable_downstream(conn, up1) == [down]
            assert task_store.startable_downstream(conn, up2) == [down]

    def test_timestamps_of_tasks_come_back_aware_utc(self, engine: Engine) -> None:
        not_before = datetime(2024, 5, 1, 21, 0, 0, 500, tzinfo=TOKYO)
        with engine.begin() as conn:
            attempt_id = _attempt(conn)
            task_id = _insert(
                conn, attempt_id, "+a", state=TaskState.RETRY_WAITING, not_before=not_before
            )
        with engine.connect() as conn:
            task = task_store.get_task(conn, task_id)
            due_early = task_store.select_tasks_due(
                conn, TaskState.RETRY_WAITING, not_before - timedelta(microseconds=1), 10
            )
            due_then = task_store.select_tasks_due(conn, TaskState.RETRY_WAITING, not_before, 10)
            earliest = task_store.earliest_not_before(conn, [TaskState.RETRY_WAITING])
        assert task.not_before == not_before
        assert task.not_before is not None and task.not_before.utcoffset() == timedelta(0)
        assert earliest == not_before
        assert earliest is not None and earliest.utcoffset() == timedelta(0)
        assert due_early == []
        assert [t.id for t in due_then] == [task_id]


class TestResetDescendants:
    def _tree(self, conn: Connection) -> dict[str, int]:
        """A group ``+g`` with static and generated descendants, all finished."""
        attempt_id = _attempt(conn)
        done: dict[str, Any] = {
            "state": TaskState.SUCCESS,
            "lease_token": 3,
            "retry_count": 1,
            "params": {"p": 1},
            "result": {"store": {"x": 1}},
            "output_params": {"x": 1},
            "error": {"message": "earlier"},
            "started_at": NOW,
            "finished_at": NOW,
            "not_before": NOW,
        }
        ids: dict[str, int] = {}
        ids["+g"] = _insert(conn, attempt_id, "+g", is_group=True, state=TaskState.PLANNED)
        ids["+g+a"] = _insert(conn, attempt_id, "+g+a", parent_id=ids["+g"], **done)
        ids["+g+b"] = _insert(
            conn, attempt_id, "+g+b", parent_id=ids["+g"], position=1, is_group=True, **done
        )
        ids["+g+b+c"] = _insert(conn, attempt_id, "+g+b+c", parent_id=ids["+g+b"], **done)
        # generated: a _check under a static task, and a ^sub subtree with its own edge
        ids["+g+a^check"] = _insert(
            conn, attempt_id, "+g+a^check", parent_id=ids["+g+a"], is_generated=True, **done
        )
        ids["+g+b+c^sub"] = _insert(
            conn,
            attempt_id,
            "+g+b+c^sub",
            parent_id=ids["+g+b+c"],
            is_generated=True,
            is_group=True,
            **done,
        )
        for position, name in enumerate(("+x", "+y")):
            ids[f"^sub{name}"] = _insert(
                conn,
                attempt_id,
                f"+g+b+c^sub{name}",
                parent_id=ids["+g+b+c^sub"],
                position=position,
                is_generated=True,
                **done,
            )
        task_store.insert_dependencies(
            conn, [(ids["+g+a"], ids["+g+b"]), (ids["^sub+x"], ids["^sub+y"])]
        )
        task_store.write_task_logs(
            conn,
            [],
            [
                {
                    "task_id": ids[name],
                    "attempt_id": attempt_id,
                    "lease_token": 3,
                    "path": f"{name}.log",
                    "size_bytes": 1,
                    "created_at": NOW,
                }
                for name in ("+g+a", "+g+a^check")
            ],
        )
        return ids

    def test_generated_descendants_are_deleted(self, engine: Engine) -> None:
        with engine.begin() as conn:
            ids = self._tree(conn)
            task_store.reset_descendants(conn, ids["+g"], NOW + timedelta(1))
            attempt_id = task_store.get_task(conn, ids["+g"]).attempt_id
            remaining = {t.full_name for t in task_store.list_attempt_tasks(conn, attempt_id)}
            logged = conn.execute(select(task_logs.c.task_id)).scalars().all()
        assert remaining == {"+g", "+g+a", "+g+b", "+g+b+c"}
        assert logged == [ids["+g+a"]]

    def test_static_descendants_are_reset_to_blocked_keeping_lease_tokens(
        self, engine: Engine
    ) -> None:
        later = NOW + timedelta(minutes=1)
        with engine.begin() as conn:
            ids = self._tree(conn)
            task_store.reset_descendants(conn, ids["+g"], later)
            static = task_store.get_tasks(conn, [ids["+g+a"], ids["+g+b"], ids["+g+b+c"]])
            group = task_store.get_task(conn, ids["+g"])
        for task in static:
            assert task.state is TaskState.BLOCKED
            assert task.lease_token == 3
            assert task.retry_count == 0
            assert (task.params, task.result, task.output_params, task.error) == (None,) * 4
            assert (task.not_before, task.started_at, task.finished_at) == (None, None, None)
        assert group.state is TaskState.PLANNED  # the task itself is left to the caller

    def test_static_sibling_dependencies_survive_a_reset(self, engine: Engine) -> None:
        with engine.begin() as conn:
            ids = self._tree(conn)
            task_store.reset_descendants(conn, ids["+g"], NOW)
            edges = conn.execute(
                select(task_dependencies.c.upstream_id, task_dependencies.c.downstream_id)
            ).all()
        assert [tuple(e) for e in edges] == [(ids["+g+a"], ids["+g+b"])]
