"""Specifications of retention: what a prune removes, and everything it must keep."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import Engine, func, select, text

from tests.support.history_seed import (
    DAY,
    NOW,
    add_project,
    add_revision,
    add_run,
    add_schedule,
    count_rows,
)
from tickwork.shared.domain.states import AttemptState
from tickwork.shared.errors import InvalidConfig
from tickwork.shared.store.retention import (
    RetentionPolicy,
    parse_duration,
    prune_history,
    pruning_lock,
)
from tickwork.shared.store.retention_batches import BatchLimits
from tickwork.shared.store.tables import (
    attempts,
    revisions,
    sessions,
    task_log_chunks,
    task_logs,
    tasks,
)

POLICY = RetentionPolicy(history=30 * DAY, logs=30 * DAY, keep_revisions=2)
FAST = BatchLimits(pause_seconds=0)


def session_ids(engine: Engine) -> set[int]:
    with engine.connect() as conn:
        return {int(i) for i in conn.execute(select(sessions.c.id)).scalars()}


@pytest.fixture
def definition(engine: Engine) -> tuple[int, int]:
    """A project and the definition of its one revision."""
    with engine.begin() as conn:
        project_id = add_project(conn)
        return project_id, add_revision(conn, project_id, "r1")


class TestPolicy:
    @pytest.mark.parametrize(
        ("raw", "expected"),
        [
            ("90d", timedelta(days=90)),
            ("12h", timedelta(hours=12)),
            ("30m", timedelta(minutes=30)),
            ("7", timedelta(days=7)),
            ("0", None),
            ("off", None),
            ("OFF", None),
        ],
    )
    def test_durations_read_as_days_hours_minutes_or_off(
        self, raw: str, expected: timedelta | None
    ) -> None:
        assert parse_duration(raw) == expected

    def test_defaults_keep_ninety_days_and_ten_revisions(self) -> None:
        policy = RetentionPolicy.from_environment({})
        assert policy == RetentionPolicy(90 * DAY, 90 * DAY, 10)
        assert policy.describe() == {"history_days": 90, "log_days": 90, "keep_revisions": 10}
        assert policy.sentence() == "History kept 90 days; logs 90 days"

    def test_log_retention_defaults_to_history_retention(self) -> None:
        policy = RetentionPolicy.from_environment({"TICKWORK_RETENTION": "14d"})
        assert policy.logs == 14 * DAY

    def test_everything_off_is_described_as_null(self) -> None:
        names = ("TICKWORK_RETENTION", "TICKWORK_KEEP_REVISIONS", "TICKWORK_AUDIT_RETENTION")
        environ = dict.fromkeys(names, "off")
        policy = RetentionPolicy.from_environment(environ)
        assert policy.keeps_everything
        assert policy.describe() is None

    @pytest.mark.parametrize(
        ("name", "value"),
        [
            ("TICKWORK_RETENTION", "banana"),
            ("TICKWORK_LOG_RETENTION", "-3d"),
            ("TICKWORK_KEEP_REVISIONS", "many"),
        ],
    )
    def test_a_bad_value_names_its_variable(self, name: str, value: str) -> None:
        with pytest.raises(InvalidConfig, match=name):
            RetentionPolicy.from_environment({name: value})


class TestPruneHistory:
    def test_old_finished_sessions_go_with_all_their_rows(
        self, engine: Engine, definition: tuple[int, int]
    ) -> None:
        # Given three finished sessions 40 days old and a newer one
        project_id, definition_id = definition
        with engine.begin() as conn:
            old = [add_run(conn, project_id, definition_id, NOW - (40 + i) * DAY) for i in range(3)]
            newest = add_run(conn, project_id, definition_id, NOW - DAY)
        # When history older than 30 days is pruned
        result = prune_history(engine, POLICY, NOW, limits=FAST)
        # Then the old sessions and every row of theirs are gone, per table
        assert session_ids(engine) == {newest.session_id}
        with engine.connect() as conn:
            assert count_rows(conn) | {"revisions": 1} == {
                "sessions": 1,
                "attempts": 1,
                "tasks": 3,
                "task_dependencies": 1,
                "task_logs": 2,
                "task_log_chunks": 4,
                "alerts": 1,
                "revisions": 1,
                "workflow_definitions": 1,
                "workflow_configs": 1,
                "project_archives": 0,
            }
        assert result.per_table() | {} == {
            **dict.fromkeys(result.per_table(), 0),
            "sessions": 3,
            "attempts": 3,
            "tasks": 9,
            "task_dependencies": 3,
            "task_logs": 6,
            "task_log_chunks": 12,
            "alerts": 3,
        }
        assert old

    def test_running_queued_and_waiting_attempts_are_untouched(
        self, engine: Engine, definition: tuple[int, int]
    ) -> None:
        # Given old sessions whose attempts have not ended, and one with an ended attempt
        # beside a live one
        project_id, definition_id = definition
        live_states = [AttemptState.RUNNING, AttemptState.CREATED, AttemptState.WAITING]
        live_states.append(AttemptState.CANCELING)
        with engine.begin() as conn:
            live = [
                add_run(conn, project_id, definition_id, NOW - (50 + i) * DAY, state=state)
                for i, state in enumerate(live_states)
            ]
            mixed = add_run(conn, project_id, definition_id, NOW - 60 * DAY)
            retry = add_run(
                conn,
                project_id,
                definition_id,
                NOW,
                state=AttemptState.RUNNING,
                session_id=mixed.session_id,
            )
            add_run(conn, project_id, definition_id, NOW - DAY)
        # When pruned
        prune_history(engine, POLICY, NOW, limits=FAST)
        # Then every session with a live attempt is there, its live logs' text included
        kept = session_ids(engine)
        assert {run.session_id for run in live} | {mixed.session_id} <= kept
        live_attempts = [run.attempt_id for run in live] + [retry.attempt_id]
        with engine.connect() as conn:
            chunks = conn.execute(
                select(func.count())
                .select_from(task_log_chunks.join(tasks))
                .where(tasks.c.attempt_id.in_(live_attempts))
            ).scalar_one()
        assert chunks == 4 * len(live_attempts)

    def test_an_attempt_that_ended_recently_keeps_an_old_session(
        self, engine: Engine, definition: tuple[int, int]
    ) -> None:
        project_id, definition_id = definition
        with engine.begin() as conn:
            late = add_run(conn, project_id, definition_id, NOW - 60 * DAY, finished_at=NOW - DAY)
            add_run(conn, project_id, definition_id, NOW - DAY)
        prune_history(engine, POLICY, NOW, limits=FAST)
        assert late.session_id in session_ids(engine)

    def test_the_newest_session_of_each_schedule_and_workflow_is_kept(
        self, engine: Engine, definition: tuple[int, int]
    ) -> None:
        # Given a scheduled workflow and another one, each with only old sessions
        project_id, definition_id = definition
        with engine.begin() as conn:
            other = add_revision(conn, project_id, "r2", "other")
            schedule_id = add_schedule(conn, project_id, definition_id)
            runs = [
                add_run(
                    conn, project_id, definition_id, NOW - (90 - i) * DAY, schedule_id=schedule_id
                )
                for i in range(3)
            ]
            other_runs = [
                add_run(conn, project_id, other, NOW - (90 - i) * DAY, workflow="other")
                for i in range(2)
            ]
            # and a newer session of the scheduled workflow that is only waiting
            waiting = add_run(
                conn,
                project_id,
                definition_id,
                NOW - 50 * DAY,
                state=AttemptState.WAITING,
                schedule_id=schedule_id,
            )
        # When pruned
        prune_history(engine, POLICY, NOW, limits=FAST)
        # Then the newest session that ran of each workflow stays (the one
        # last_executed_session_time reads), and the waiting one
        assert session_ids(engine) == {
            runs[-1].session_id,
            other_runs[-1].session_id,
            waiting.session_id,
        }

    def test_a_session_an_attempt_of_another_kept_session_resumes_is_kept(
        self, engine: Engine, definition: tuple[int, int]
    ) -> None:
        project_id, definition_id = definition
        with engine.begin() as conn:
            resumed = add_run(conn, project_id, definition_id, NOW - 80 * DAY)
            add_run(conn, project_id, definition_id, NOW - DAY, resume_from=resumed.attempt_id)
        prune_history(engine, POLICY, NOW, limits=FAST)
        assert resumed.session_id in session_ids(engine)

    def test_revisions_in_use_or_among_the_newest_are_kept_and_unused_old_ones_go(
        self, engine: Engine
    ) -> None:
        # Given five revisions: r1 used by an old run that goes, r2 by a kept one,
        # r3 unused, r4 and r5 the newest; r1 and r3 share an archive only they name
        with engine.begin() as conn:
            project_id = add_project(conn)
            r1 = add_revision(conn, project_id, "r1", archive="a" * 64)
            r2 = add_revision(conn, project_id, "r2", archive="b" * 64)
            add_revision(conn, project_id, "r3", archive="a" * 64)
            add_revision(conn, project_id, "r4", archive="b" * 64)
            r5 = add_revision(conn, project_id, "r5")
            add_run(conn, project_id, r1, NOW - 90 * DAY)
            add_run(conn, project_id, r2, NOW - 2 * DAY)
            add_schedule(conn, project_id, r5)
        # When pruned, keeping the two newest revisions
        result = prune_history(engine, POLICY, NOW, limits=FAST)
        # Then r2 (used), r4 and r5 (newest) stay; archive a went with r1 and r3
        with engine.connect() as conn:
            names = set(conn.execute(select(revisions.c.name)).scalars())
            digests = set(conn.execute(text("SELECT digest FROM project_archives")).scalars())
        assert names == {"r2", "r4", "r5"}
        assert digests == {"b" * 64}
        assert result.removed["revisions"] == 2
        assert result.removed["workflow_definitions"] == 2
        assert result.removed["workflow_configs"] == 2
        assert result.removed["project_archives"] == 1

    def test_log_retention_alone_removes_the_text_and_marks_the_rows_pruned(
        self, engine: Engine, definition: tuple[int, int]
    ) -> None:
        # Given a session 10 days old and one of today, history kept 30 days, logs 5
        project_id, definition_id = definition
        with engine.begin() as conn:
            old = add_run(conn, project_id, definition_id, NOW - 10 * DAY)
            add_run(conn, project_id, definition_id, NOW - timedelta(hours=3))
        policy = RetentionPolicy(history=30 * DAY, logs=5 * DAY, keep_revisions=None)
        # When pruned
        result = prune_history(engine, policy, NOW, limits=FAST)
        # Then the old session's logs lost their chunks, kept their rows, marked pruned
        with engine.connect() as conn:
            rows = conn.execute(select(task_logs.c.attempt_id, task_logs.c.pruned_at)).all()
            counts = count_rows(conn)
        assert {(row.attempt_id, row.pruned_at) for row in rows if row.pruned_at} == {
            (old.attempt_id, NOW)
        }
        assert counts["task_logs"] == 4
        assert counts["task_log_chunks"] == 4
        assert counts["sessions"] == 2
        assert result.removed["task_log_chunks"] == 4
        assert result.logs_pruned == 2

    def test_a_second_prune_removes_nothing(
        self, engine: Engine, definition: tuple[int, int]
    ) -> None:
        project_id, definition_id = definition
        with engine.begin() as conn:
            for i in range(4):
                add_run(conn, project_id, definition_id, NOW - (40 + i) * DAY)
        assert prune_history(engine, POLICY, NOW, limits=FAST).total > 0
        again = prune_history(engine, POLICY, NOW, limits=FAST)
        assert again.total == 0
        assert again.logs_pruned == 0

    def test_a_dry_run_changes_nothing_and_reports_what_a_prune_removes(
        self, engine: Engine, definition: tuple[int, int]
    ) -> None:
        project_id, definition_id = definition
        with engine.begin() as conn:
            for i in range(5):
                add_run(conn, project_id, definition_id, NOW - (40 + i) * DAY)
            for name in ("r2", "r3", "r4"):
                add_revision(conn, project_id, name)
            before = count_rows(conn)
        small = BatchLimits(sessions=2, pause_seconds=0)
        dry = prune_history(engine, POLICY, NOW, dry_run=True, limits=small)
        with engine.connect() as conn:
            assert count_rows(conn) == before
        real = prune_history(engine, POLICY, NOW, limits=small)
        assert dry.removed == real.removed
        assert real.removed["revisions"] == 1

    def test_off_keeps_everything(self, engine: Engine, definition: tuple[int, int]) -> None:
        project_id, definition_id = definition
        with engine.begin() as conn:
            for i in range(3):
                add_run(conn, project_id, definition_id, NOW - (400 + i) * DAY)
            add_revision(conn, project_id, "r2")
            before = count_rows(conn)
        policy = RetentionPolicy(history=None, logs=None, keep_revisions=None)
        assert prune_history(engine, policy, NOW, limits=FAST).total == 0
        with engine.connect() as conn:
            assert count_rows(conn) == before

    def test_batches_hold_a_bounded_number_of_sessions(
        self, engine: Engine, definition: tuple[int, int]
    ) -> None:
        # Given seven old sessions
        project_id, definition_id = definition
        with engine.begin() as conn:
            for i in range(7):
                add_run(conn, project_id, definition_id, NOW - (40 + i) * DAY)
            add_run(conn, project_id, definition_id, NOW)
        # When pruned three sessions (or six tasks) a batch
        sizes: list[int] = []
        seen = [0]

        def on_batch(kind: str, result: object) -> None:
            if kind == "sessions":
                total = result.removed["sessions"]
                sizes.append(total - seen[0])
                seen[0] = total

        limits = BatchLimits(sessions=3, tasks=6, pause_seconds=0)
        prune_history(engine, POLICY, NOW, limits=limits, on_batch=on_batch)
        # Then no batch removed more than two sessions (their tasks reach the bound)
        assert sum(sizes) == 7
        assert max(sizes) == 2

    def test_one_project_can_be_pruned_alone(
        self, engine: Engine, definition: tuple[int, int]
    ) -> None:
        project_id, definition_id = definition
        with engine.begin() as conn:
            other = add_project(conn, "other")
            other_definition = add_revision(conn, other, "r1")
            mine = [
                add_run(conn, project_id, definition_id, NOW - (40 + i) * DAY) for i in range(2)
            ]
            theirs = [
                add_run(conn, other, other_definition, NOW - (40 + i) * DAY) for i in range(2)
            ]
        prune_history(engine, POLICY, NOW, project_id=other, limits=FAST)
        kept = session_ids(engine)
        assert {run.session_id for run in mine} <= kept
        assert {run.session_id for run in theirs} & kept == {theirs[0].session_id}


def test_one_pruner_holds_the_lock_at_a_time_on_postgresql(migrated_postgres_url: str) -> None:
    from tickwork.shared.store.engine import create_store_engine

    engine = create_store_engine(migrated_postgres_url)
    try:
        with pruning_lock(engine) as first, pruning_lock(engine) as second:
            assert (first, second) == (True, False)
        with pruning_lock(engine) as again:
            assert again
    finally:
        engine.dispose()


def test_a_new_sqlite_store_gives_space_back_incrementally(migrated_sqlite_url: str) -> None:
    from tickwork.shared.store.engine import create_store_engine

    engine = create_store_engine(migrated_sqlite_url)
    try:
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA auto_vacuum").scalar() == 2  # INCREMENTAL
    finally:
        engine.dispose()


def test_attempts_keep_their_state_through_a_prune(
    engine: Engine, definition: tuple[int, int]
) -> None:
    project_id, definition_id = definition
    with engine.begin() as conn:
        running = add_run(
            conn, project_id, definition_id, NOW - 100 * DAY, state=AttemptState.RUNNING
        )
    prune_history(engine, POLICY, NOW, limits=FAST)
    with engine.connect() as conn:
        state = conn.execute(
            select(attempts.c.state).where(attempts.c.id == running.attempt_id)
        ).scalar_one()
    assert state == AttemptState.RUNNING.value


class TestBatchPauses:
    def test_a_prune_sleeps_three_times_as_long_as_its_last_batch_took(self) -> None:
        limits = BatchLimits()
        assert limits.pause_after(0.4) == pytest.approx(1.2)

    def test_a_quick_batch_still_sleeps_the_least_pause(self) -> None:
        assert BatchLimits(pause_seconds=0.2).pause_after(0.01) == 0.2

    def test_no_least_pause_means_full_speed(self) -> None:
        assert BatchLimits(pause_seconds=0).pause_after(5.0) == 0.0
