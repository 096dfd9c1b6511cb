"""Specification of the pass ahead: a due time's sessions written before it, committed at it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, func, select, text

from tests.scheduler.test_scheduler import Store
from tickwork.services.scheduler import ahead
from tickwork.services.scheduler.loop import Scheduler
from tickwork.shared.store import emission as emission_store
from tickwork.shared.store.dialects import dialect_of
from tickwork.shared.store.tables import attempts, sessions

EVERY_SECOND = "cron>: '@every 1s'"


@pytest.fixture
def store(engine: Engine) -> Store:
    if not dialect_of(engine).concurrent_writers:
        pytest.skip("a pass ahead holds a transaction open: only where writers do not queue")
    return Store(engine)


def database_now(engine: Engine) -> datetime:
    with engine.connect() as conn:
        found = emission_store.database_now(conn)
    assert found is not None
    return found


def session_rows(engine: Engine) -> list[tuple[str, datetime]]:
    with engine.connect() as conn:
        query = select(sessions.c.workflow_name, sessions.c.session_time)
        return sorted((name, time) for name, time in conn.execute(query).all())


def start_of_a_second(engine: Engine) -> datetime:
    """The database's time, just after a whole second (sleeping until one has begun)."""
    now = database_now(engine)
    time.sleep(1.02 - now.microsecond / 1e6)
    return database_now(engine)


def push_every_second(store: Store, name: str, text: str = EVERY_SECOND) -> datetime:
    """Push an every-second schedule (or the one ``text`` gives) and let a pass start it;
    its next due time (most of a second away for every second: the push waits for a
    second to begin)."""
    pushed = start_of_a_second(store.engine)
    store.push(text, now=pushed, name=name)
    Scheduler(store.engine).tick(pushed)  # a new schedule starts after its push
    due_at = store.schedule(name).next_run_time
    assert due_at is not None and due_at > pushed
    return due_at


class SessionWatcher:
    """Polls, from its own connection, how many sessions are visible and at what time."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.seen: list[tuple[datetime, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        query = text("SELECT clock_timestamp(), (SELECT count(*) FROM sessions)")
        with self.engine.connect() as conn:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            while not self._stop.wait(0.01):
                at, visible = conn.execute(query).one()
                self.seen.append((at, int(visible)))

    def __enter__(self) -> SessionWatcher:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@pytest.fixture
def watcher(engine: Engine) -> Iterator[SessionWatcher]:
    with SessionWatcher(engine) as watching:
        yield watching


class TestPassAhead:
    @pytest.mark.timeout(30)
    def test_sessions_written_ahead_appear_at_their_run_time_not_before(
        self, store: Store, watcher: SessionWatcher
    ) -> None:
        # Given an every-second schedule, whose next time is less than a second away
        due_at = push_every_second(store, "wf")
        # When the scheduler ticks on the database's clock
        report = Scheduler(store.engine).tick()
        # Then the tick wrote that time's session ahead and returned once it had come
        assert report.emitted == 1 and report.more_ready
        assert session_rows(store.engine) == [("wf", due_at)]
        assert database_now(store.engine) >= due_at
        # and no other connection saw the session before its run time
        early = [visible for at, visible in watcher.seen if at < due_at]
        assert early and not any(early), "the session was visible before its run time"

    @pytest.mark.timeout(30)
    def test_two_schedulers_writing_ahead_emit_each_session_once(self, store: Store) -> None:
        # Given twelve every-second schedules
        pushed = start_of_a_second(store.engine)
        for n in range(12):
            store.push(EVERY_SECOND, now=pushed, name=f"wf{n}")
        Scheduler(store.engine).tick(pushed)
        due_at = store.schedule("wf0").next_run_time
        schedulers = [Scheduler(store.engine, batch_size=2) for _ in range(2)]
        reports: list[Any] = []

        def tick(scheduler: Scheduler) -> None:
            # As run_forever does: what a pass ahead had no time for, the next tick emits
            for _ in range(10):
                reports.append(scheduler.tick())
                if not reports[-1].more_ready:
                    return

        # When both tick at once, each writing the same due time ahead
        threads = [threading.Thread(target=tick, args=(s,)) for s in schedulers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=20)
        # Then each schedule has one session at that time, and no session is there twice
        # (on a slow machine a tick may last into the next second, whose time is then
        # due and emitted too), each with one attempt
        rows = session_rows(store.engine)
        assert [row for row in rows if row[1] == due_at] == sorted(
            (f"wf{n}", due_at) for n in range(12)
        )
        assert len(set(rows)) == len(rows)
        assert sum(report.emitted for report in reports) == len(rows)
        with store.engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(attempts)).scalar_one() == len(
                rows
            )

    @pytest.mark.timeout(30)
    def test_a_scheduler_stopped_before_the_due_time_leaves_its_sessions_to_the_next_pass(
        self, store: Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # Given an every-second schedule, and a scheduler told to stop once it has
        # written the next time's session ahead
        due_at = push_every_second(store, "wf")
        scheduler = Scheduler(store.engine)
        wait_for = ahead._wait_for

        def stop_first(s: Scheduler, conn: Connection, target: Any) -> bool:
            written = conn.execute(select(func.count()).select_from(sessions)).scalar_one()
            assert written == 1  # in its own transaction
            s.stop()
            return wait_for(s, conn, target)

        monkeypatch.setattr(ahead, "_wait_for", stop_first)
        # When it ticks
        report = scheduler.tick()
        # Then nothing was committed and the schedule is still due at that time
        assert report.emitted == 0
        assert session_rows(store.engine) == []
        assert store.schedule().next_run_time == due_at
        # and the next scheduler's pass emits it once
        assert Scheduler(store.engine).tick(due_at).emitted == 1
        assert session_rows(store.engine) == [("wf", due_at)]

    @pytest.mark.timeout(30)
    def test_a_skip_schedule_whose_attempt_runs_is_left_to_the_pass_at_its_due_time(
        self, store: Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # Given an every-2-seconds schedule with overlap: skip, its first attempt running
        # (its next due time is then within PREPARE_SECONDS and leaves a busy machine
        # two seconds, not one, to reach the pass ahead for it)
        first = push_every_second(store, "wf", "cron>: '@every 2s'\noverlap: skip")
        scheduler = Scheduler(store.engine)
        assert scheduler.tick().emitted == 1
        second = store.schedule("wf").next_run_time
        assert second is not None and second > first
        wait_for = ahead._wait_for

        def finish_first(s: Scheduler, conn: Connection, target: Any) -> bool:
            store.finish_all()  # the attempt ends before the next due time
            return wait_for(s, conn, target)

        monkeypatch.setattr(ahead, "_wait_for", finish_first)
        # When the next time's pass ahead meets the running attempt, and it ends meanwhile
        scheduler.tick()
        monkeypatch.setattr(ahead, "_wait_for", wait_for)
        scheduler.tick(second)
        # Then that time was started at its due time, not recorded as missed
        assert [t for name, t in session_rows(store.engine) if t <= second] == [first, second]
        assert store.missed() == []

    def test_the_idle_wait_ends_a_pass_ahead_before_the_due_time(self, store: Store) -> None:
        # Given a schedule due in about a minute
        store.push("cron>: '* * * * *'", now=database_now(store.engine))
        due_at = store.schedule().next_run_time
        assert due_at is not None
        # Then the scheduler sleeps until that time less the lead of a pass ahead
        scheduler = Scheduler(store.engine, prepare_seconds=2.0)
        left = (due_at - database_now(store.engine)).total_seconds()
        assert scheduler.seconds_until_due() <= max(left - 2.0, 0.0) + 0.05
