"""Specifications of what wakes log followers: PostgreSQL NOTIFY on the log channel,
heard by one listening connection per process, and the reads followers share."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, event

from tests.api._seed import THREE_STEPS, add_project, add_sessions
from tickwork.services.api.routes.logs import FOLLOW_MIN_READ_SECONDS, AttemptSnapshots
from tickwork.shared.domain.states import AttemptState
from tickwork.shared.store import tasks as task_store
from tickwork.shared.store.engine import create_store_engine
from tickwork.shared.store.log_notices import LogNotices
from tickwork.shared.store.logs import notify_log_readers

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def notices(migrated_postgres_url: str) -> Iterator[LogNotices]:
    listening = LogNotices(migrated_postgres_url)
    yield listening
    listening.close()


def test_a_committed_notice_wakes_the_followers_of_its_attempt_only(
    notices: LogNotices, migrated_postgres_url: str
) -> None:
    # Given a follower of attempt 7 waiting, and the listener connected
    assert notices.wait(7, 0, 0.0) == 0
    assert notices.listening
    woke: list[int] = []
    waiter = threading.Thread(target=lambda: woke.append(notices.wait(7, 0, 10.0)))
    waiter.start()
    engine = create_store_engine(migrated_postgres_url)
    try:
        # When a transaction notifies attempts 3 and 7, and commits
        started = time.monotonic()
        with engine.begin() as conn:
            notify_log_readers(conn, [3, 7, 7])
        waiter.join(timeout=10)
    finally:
        engine.dispose()
    # Then the follower woke at once, its attempt's count moved once, the other's too
    assert woke == [1]
    assert time.monotonic() - started < 5
    assert (notices.count(7), notices.count(3), notices.count(8)) == (1, 1, 0)


def test_a_rolled_back_notice_wakes_nobody(notices: LogNotices, migrated_postgres_url: str) -> None:
    notices.wait(7, 0, 0.0)
    engine = create_store_engine(migrated_postgres_url)
    try:
        with engine.connect() as conn, conn.begin() as transaction:
            notify_log_readers(conn, [7])
            transaction.rollback()
    finally:
        engine.dispose()
    assert notices.wait(7, 0, 1.5) == 0


def test_without_a_database_to_listen_to_followers_poll_and_never_wait() -> None:
    sqlite = LogNotices(None)
    started = time.monotonic()
    assert sqlite.wait(1, 0, 5.0) == 0
    assert not sqlite.listening
    assert time.monotonic() - started < 1


def test_followers_of_one_attempt_share_one_read_per_change(engine: Engine) -> None:
    # Given a running attempt, and the statements sent to the store counted
    with engine.begin() as conn:
        project_id = add_project(conn, "etl", {"steps": THREE_STEPS})
    add_sessions(engine, project_id, "steps", 1, state=AttemptState.RUNNING)
    sent: list[str] = []

    def count(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            sent.append(statement)

    event.listen(engine, "before_cursor_execute", count)
    snapshots = AttemptSnapshots()
    # When 100 followers read it at the same notice
    reads = [snapshots.read(engine, 1, 0) for _ in range(100)]
    # Then the store was read once, and all of them saw the same
    assert len(sent) == 2  # the state, then the logs
    assert all(read == reads[0] for read in reads)
    # And a later notice, or the sharing time passing, reads again
    snapshots.read(engine, 1, 1)
    assert len(sent) == 4
    time.sleep(FOLLOW_MIN_READ_SECONDS)
    snapshots.read(engine, 1, 1)
    assert len(sent) == 6


def test_the_statement_that_queues_runs_carries_the_notices_even_when_it_queues_none(
    notices: LogNotices, migrated_postgres_url: str
) -> None:
    # Given a follower of attempt 9 waiting, and the listener connected
    assert notices.wait(9, 0, 0.0) == 0
    engine = create_store_engine(migrated_postgres_url)
    try:
        # When a pass's queueing statement, which finds no task to queue, commits
        with engine.begin() as conn:
            logs = task_store.LogRows([], [], (), [9])
            tokens, left = task_store.mark_tasks_queued_logging(conn, {10**9: None}, NOW, logs)
    finally:
        engine.dispose()
    # Then nothing was queued, nothing is left to notify, and the follower woke
    assert (tokens, left) == ({}, task_store.LogRows([], []))
    assert notices.wait(9, 0, 10.0) == 1
