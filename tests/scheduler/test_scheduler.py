"""Specification of the scheduler's tick: one session per time, policies, activation history."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select, update
from sqlalchemy.exc import OperationalError

from tests.support.statements import StatementLog
from tickwork.services.scheduler.loop import Scheduler
from tickwork.shared.domain.instants import LATEST
from tickwork.shared.domain.states import AttemptState
from tickwork.shared.dsl.parser import parse_workflow_text
from tickwork.shared.errors import UnknownValue
from tickwork.shared.store import emission as emission_store
from tickwork.shared.store import projects as project_store
from tickwork.shared.store import schedules as schedule_store
from tickwork.shared.store.dialects import dialect_of
from tickwork.shared.store.tables import attempts, schedule_missed, schedules, sessions

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def minute(n: int) -> datetime:
    return T0 + timedelta(minutes=n)


class Store:
    """A project in a test store whose workflows are pushed from YAML snippets."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.revisions = 0

    def push(
        self,
        schedule: str | None,
        *,
        now: datetime,
        name: str = "wf",
        timezone: str = "UTC",
        schedule_from: datetime | None = None,
    ) -> None:
        text = f"timezone: {timezone}\n"
        if schedule is not None:
            text += "schedule:\n" + "".join(f"  {line}\n" for line in schedule.splitlines())
        text += "+a:\n  echo>: hi\n"
        definition = parse_workflow_text(text, f"{name}.dig", Path("/tmp"))
        self.revisions += 1
        with self.engine.begin() as conn:
            project_id = project_store.ensure_project(conn, "proj", now)
            revision_id = project_store.ensure_revision(
                conn, project_id, f"r{self.revisions}", {}, now
            )
            definition_id = project_store.ensure_workflow_definition(conn, revision_id, definition)
            schedule_store.upsert_schedule(
                conn,
                project_id=project_id,
                definition_id=definition_id,
                definition=definition,
                now=now,
                schedule_from=schedule_from,
            )

    def schedule(self, name: str = "wf") -> schedule_store.ScheduleRow:
        with self.engine.connect() as conn:
            return schedule_store.find_schedule(conn, "proj", name)

    def session_times(self, name: str = "wf") -> list[datetime]:
        query = (
            select(sessions.c.session_time)
            .where(sessions.c.workflow_name == name)
            .order_by(sessions.c.session_time)
        )
        with self.engine.connect() as conn:
            return list(conn.execute(query).scalars())

    def attempt_states(self) -> dict[datetime, str]:
        query = select(sessions.c.session_time, attempts.c.state).select_from(
            attempts.join(sessions)
        )
        with self.engine.connect() as conn:
            return {time: state for time, state in conn.execute(query)}

    def finish_all(self) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                update(attempts)
                .where(attempts.c.state.in_(["created", "running"]))
                .values(state="success")
            )

    def missed(self, name: str = "wf") -> list[tuple[datetime, datetime, int | None, str]]:
        with self.engine.connect() as conn:
            rows = schedule_store.list_missed(conn, self.schedule(name).id)
        return sorted((m.first_session_time, m.last_session_time, m.count, m.reason) for m in rows)


@pytest.fixture
def store(engine: Engine) -> Store:
    return Store(engine)


def run_until_idle(scheduler: Scheduler, now: datetime, limit: int = 50) -> int:
    """Tick at ``now`` until nothing more is emitted; the number of sessions emitted."""
    emitted = 0
    for _ in range(limit):
        report = scheduler.tick(now)
        emitted += report.emitted
        if not report.emitted and not report.missed:
            return emitted
    raise AssertionError("the scheduler kept emitting")


class TestEmission:
    def test_a_new_schedule_starts_with_the_first_time_after_it_was_pushed(
        self, store: Store
    ) -> None:
        store.push("cron>: '*/10 * * * *'", now=minute(3))
        scheduler = Scheduler(store.engine)
        assert run_until_idle(scheduler, minute(9)) == 0
        assert run_until_idle(scheduler, minute(10)) == 1
        assert store.session_times() == [minute(10)]

    def test_each_due_time_is_emitted_once_with_one_created_attempt(self, store: Store) -> None:
        store.push("cron>: '* * * * *'", now=T0)
        scheduler = Scheduler(store.engine)
        for n in (1, 2, 2, 3):
            scheduler.tick(minute(n) + timedelta(seconds=1))
            store.finish_all()
        assert store.session_times() == [minute(1), minute(2), minute(3)]
        with store.engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(attempts)).scalar_one() == 3

    def test_the_schedule_row_records_checkpoint_and_next_times(self, store: Store) -> None:
        store.push("daily>: 07:00:00", now=T0, timezone="Asia/Tokyo")
        Scheduler(store.engine).tick(T0)
        row = store.schedule()
        # Next session: midnight in Tokyo (15:00 UTC); it runs at 07:00 Tokyo (22:00 UTC).
        assert row.next_schedule_time == datetime(2026, 11, 30, 15, tzinfo=UTC)
        assert row.next_run_time == datetime(2026, 11, 30, 22, tzinfo=UTC)

    def test_a_session_is_emitted_at_its_run_time_not_its_session_time(self, store: Store) -> None:
        store.push("cron>: '0 * * * *'\ndelay: 600", now=T0)
        scheduler = Scheduler(store.engine)
        assert run_until_idle(scheduler, T0 + timedelta(hours=1, minutes=5)) == 0
        assert run_until_idle(scheduler, T0 + timedelta(hours=1, minutes=10)) == 1
        assert store.session_times() == [T0 + timedelta(hours=1)]

    def test_schedule_from_starts_a_new_schedule_in_the_past(self, store: Store) -> None:
        store.push("cron>: '0 * * * *'", now=T0, schedule_from=T0 - timedelta(hours=3))
        assert run_until_idle(Scheduler(store.engine), T0) == 4
        assert store.session_times()[0] == T0 - timedelta(hours=3)

    def test_two_schedulers_on_one_store_never_duplicate_a_session(self, store: Store) -> None:
        store.push("cron>: '* * * * *'\ncatchup_window: 7d", now=T0 - timedelta(days=1))
        first, second = Scheduler(store.engine), Scheduler(store.engine)
        threads = [threading.Thread(target=run_until_idle, args=(s, T0)) for s in (first, second)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        times = store.session_times()
        assert len(times) == 1440 and len(set(times)) == 1440
        assert times[0] == T0 - timedelta(days=1) + timedelta(minutes=1)

    def test_a_session_emitted_elsewhere_is_counted_as_a_duplicate_not_inserted(
        self, store: Store
    ) -> None:
        store.push("cron>: '* * * * *'", now=T0)
        with store.engine.begin() as conn:
            row = schedule_store.find_schedule(conn, "proj", "wf")
            emission_store.insert_sessions(
                conn,
                [
                    emission_store.NewSession(
                        None,
                        row.project_id,
                        "wf",
                        minute(1),
                        row.workflow_definition_id,
                        "UTC",
                        None,
                        AttemptState.CREATED,
                    )
                ],
                T0,
            )
        report = Scheduler(store.engine).tick(minute(1))
        assert (report.emitted, report.duplicates) == (0, 1)
        assert store.session_times() == [minute(1)]

    def test_many_due_schedules_are_shared_by_workers_each_emitted_once(self, store: Store) -> None:
        names = [f"wf{n}" for n in range(23)]
        for name in names:
            store.push("cron>: '* * * * *'", now=T0, name=name)
        scheduler = Scheduler(store.engine, batch_size=5, workers=3)
        report = scheduler.tick(minute(1))
        assert (report.due, report.emitted) == (23, 23)
        with store.engine.connect() as conn:
            query = select(sessions.c.workflow_name, sessions.c.session_time)
            assert sorted(conn.execute(query).all()) == sorted((n, minute(1)) for n in names)
        assert scheduler.tick(minute(1)).emitted == 0


def push_every_minute(store: Store, count: int) -> None:
    """Push ``count`` every-minute schedules, all due at the same minutes."""
    for n in range(count):
        store.push("cron>: '* * * * *'", now=T0, name=f"wf{n}")


class TestBatches:
    def test_a_batch_inserts_the_sessions_of_all_its_schedules_with_one_statement(
        self, store: Store
    ) -> None:
        # Given twelve schedules due at the same minute
        push_every_minute(store, 12)
        statements = StatementLog(store.engine)
        # When one tick emits them in one batch
        with statements:
            report = Scheduler(store.engine, workers=1).tick(minute(1))
        # Then their twelve sessions went in with one INSERT
        assert report.emitted == 12
        assert statements.count("INSERT INTO sessions") == 1

    def test_running_attempts_are_read_once_per_pass_not_once_per_batch(self, store: Store) -> None:
        # Given twelve schedules due at the same minute, in batches of four
        push_every_minute(store, 12)
        statements = StatementLog(store.engine)
        # When one tick emits them
        with statements:
            report = Scheduler(store.engine, batch_size=4, workers=1).tick(minute(1))
        # Then the attempts that count against their overlap policies were read once
        assert (report.schedules, report.emitted) == (12, 12)
        assert statements.count("GROUP BY sessions.schedule_id") == 1

    def test_a_tick_lists_what_is_due_without_counting_it_first(self, store: Store) -> None:
        # Given twelve schedules due at the same minute
        push_every_minute(store, 12)
        statements = StatementLog(store.engine)
        # When one tick emits them
        with statements:
            report = Scheduler(store.engine, batch_size=4).tick(minute(1))
        # Then the listing was its first read of the schedules, and it counted them too
        assert (report.due, report.emitted) == (12, 12)
        reads = [s for s in statements.statements if "FROM schedules" in s]
        assert "count(" not in reads[0] and "schedules.last_session_time" in reads[0]

    def test_every_batch_inserts_after_the_one_count_of_running_attempts(
        self, store: Store
    ) -> None:
        # Given twelve schedules due at the same minute, in batches of four, two workers
        push_every_minute(store, 12)
        statements = StatementLog(store.engine)
        # When one tick emits them, counting beside its first batches
        with statements:
            report = Scheduler(store.engine, batch_size=4, workers=2).tick(minute(1))
        # Then no batch inserted before the count was read, and it was read once
        assert report.emitted == 12
        counted = [n for n, s in enumerate(statements.statements) if "GROUP BY sessions" in s]
        inserts = [n for n, s in enumerate(statements.statements) if "INSERT INTO sessions" in s]
        assert len(counted) == 1 and len(inserts) >= 3
        assert counted[0] < min(inserts)

    def test_a_busy_pass_starts_with_a_small_batch(
        self, store: Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # Given forty schedules due at the same minute, in batches of eight
        for n in range(40):
            store.push("cron>: '* * * * *'", now=T0, name=f"wf{n}")
        claimed: list[int] = []
        claim = emission_store.claim_listed

        def counted(conn: Any, schedule_ids: Any, now: datetime) -> Any:
            claimed.append(len(schedule_ids))
            return claim(conn, schedule_ids, now)

        monkeypatch.setattr(emission_store, "claim_listed", counted)
        # When one tick emits them
        report = Scheduler(store.engine, batch_size=8, workers=1).tick(minute(1))
        # Then its first batch held a quarter of a batch, so its sessions committed first
        assert report.emitted == 40
        assert claimed == [2, 8, 8, 8, 8, 6]

    def test_the_idle_wait_opens_the_connections_a_busy_pass_holds(self, store: Store) -> None:
        if not dialect_of(store.engine).concurrent_writers:
            pytest.skip("one connection at a time")
        # Given a scheduler with two workers, nothing due, and a fresh pool
        store.engine.dispose()
        scheduler = Scheduler(store.engine, workers=2)
        scheduler.stop()  # the wait returns at once
        # When it waits for the next due time
        scheduler.wait(1.0)
        # Then the pool holds a connection for each worker and one for the count
        assert store.engine.pool.checkedin() == 3  # type: ignore[attr-defined]

    def test_a_schedule_emitted_elsewhere_after_the_pass_listed_it_is_counted_again(
        self, store: Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        if not dialect_of(store.engine).serves_many_processes:
            pytest.skip("one scheduler writes to an embedded store")
        # Given a schedule with 40 times due, 10 per batch, at most 16 sessions running
        store.push("cron>: '* * * * *'\ncatchup_window: 7d", now=T0 - timedelta(minutes=40))
        ours, other = (Scheduler(store.engine, times_per_pass=10, workers=1) for _ in range(2))
        listed = emission_store.list_due
        interrupted = threading.Event()

        def list_then_let_the_other_emit(*args: Any) -> Any:
            due = listed(*args)
            if not interrupted.is_set():
                interrupted.set()
                other.tick(T0)  # between our listing and our claim
            return due

        monkeypatch.setattr(emission_store, "list_due", list_then_let_the_other_emit)
        # When our pass claims it after the other scheduler emitted its first 10 times
        report = ours.tick(T0)
        # Then ours counted those 10 as running: 6 more start and 4 wait
        states = list(store.attempt_states().values())
        assert report.emitted == 10 and len(states) == 20
        assert (states.count("created"), states.count("waiting")) == (16, 4)


class TestTheEndOfTheAcceptedRange:
    def test_a_schedule_emits_up_to_the_last_accepted_instant_and_is_then_finished(
        self, store: Store
    ) -> None:
        # Given a minutely schedule pushed five minutes before the last accepted instant
        store.push("cron>: '* * * * *'", now=LATEST - timedelta(minutes=5))
        # When the scheduler runs at that instant
        emitted = run_until_idle(Scheduler(store.engine), LATEST)
        # Then the last minutes of 9999-12-30 are emitted and nothing after them is planned
        last = datetime(9999, 12, 30, 23, 59, tzinfo=UTC)
        assert emitted == 5
        assert store.session_times()[-1] == last
        row = store.schedule()
        assert (row.next_schedule_time, row.next_run_time) == (None, None)
        assert row.last_session_time == last


class TestCatchUp:
    def test_downtime_is_caught_up_within_the_default_24_hour_window(self, store: Store) -> None:
        store.push("cron>: '0 * * * *'", now=T0 - timedelta(days=3))
        scheduler = Scheduler(store.engine)
        # Run times at most 24 hours old are kept, both ends included.
        assert run_until_idle(scheduler, T0) == 25
        missed = store.missed()
        assert [(m[2], m[3]) for m in missed] == [(47, "catchup")]
        assert missed[0][0] == T0 - timedelta(days=3) + timedelta(hours=1)

    @pytest.mark.slow  # seconds of work: left out of make test-fast
    def test_a_long_catch_up_is_emitted_in_batches_in_order(self, store: Store) -> None:
        store.push("cron>: '* * * * *'\ncatchup_window: none", now=T0 - timedelta(days=3))
        scheduler = Scheduler(store.engine, times_per_pass=500)
        first = scheduler.tick(T0)
        assert first.emitted == 500
        run_until_idle(scheduler, T0)
        times = store.session_times()
        assert len(times) == 4320 and times == sorted(times)

    def test_catchup_latest_emits_only_the_newest_due_time(self, store: Store) -> None:
        store.push("cron>: '0 * * * *'\ncatchup: latest", now=T0 - timedelta(hours=5))
        assert run_until_idle(Scheduler(store.engine), T0 + timedelta(minutes=30)) == 1
        assert store.session_times() == [T0]
        assert [(m[2], m[3]) for m in store.missed()] == [(4, "catchup")]

    def test_catchup_none_drops_every_late_time(self, store: Store) -> None:
        store.push("cron>: '0 * * * *'\ncatchup: none", now=T0 - timedelta(hours=5))
        assert run_until_idle(Scheduler(store.engine), T0 + timedelta(minutes=30)) == 0
        assert [(m[2], m[3]) for m in store.missed()] == [(5, "catchup")]

    def test_max_catchup_keeps_the_most_recent_times(self, store: Store) -> None:
        store.push("cron>: '0 * * * *'\nmax_catchup: 2", now=T0 - timedelta(hours=5))
        assert run_until_idle(Scheduler(store.engine), T0 + timedelta(minutes=30)) == 2
        assert store.session_times() == [T0 - timedelta(hours=1), T0]


class TestOverlap:
    def test_sessions_beyond_max_active_wait_and_start_in_order(self, store: Store) -> None:
        store.push("cron>: '0 * * * *'\nmax_active: 2", now=T0 - timedelta(hours=5))
        scheduler = Scheduler(store.engine)
        run_until_idle(scheduler, T0)
        states = store.attempt_states()
        assert sorted(states.values()) == ["created", "created", "waiting", "waiting", "waiting"]
        assert [states[T0 - timedelta(hours=h)] for h in (4, 3)] == ["created", "created"]
        store.finish_all()
        assert scheduler.tick(T0).started_waiting == 2
        states = store.attempt_states()
        assert [states[T0 - timedelta(hours=h)] for h in (2, 1, 0)] == [
            "created",
            "created",
            "waiting",
        ]

    def test_overlap_skip_records_times_while_a_session_runs_as_missed(self, store: Store) -> None:
        store.push("cron>: '* * * * *'\noverlap: skip", now=T0)
        scheduler = Scheduler(store.engine)
        scheduler.tick(minute(1))
        scheduler.tick(minute(2))
        scheduler.tick(minute(3))
        store.finish_all()
        scheduler.tick(minute(4))
        assert store.session_times() == [minute(1), minute(4)]
        assert [(m[0], m[3]) for m in store.missed()] == [
            (minute(2), "overlap"),
            (minute(3), "overlap"),
        ]

    def test_a_stored_missed_reason_outside_the_set_is_refused_when_read(
        self, store: Store
    ) -> None:
        # Given a missed range whose stored reason is none of the known ones
        store.push("cron>: '* * * * *'\noverlap: skip", now=T0)
        scheduler = Scheduler(store.engine)
        scheduler.tick(minute(1))
        scheduler.tick(minute(2))
        with store.engine.begin() as conn:
            conn.execute(update(schedule_missed).values(reason="lost"))
        # When it is read, Then the read fails naming the column
        with pytest.raises(UnknownValue, match=r"schedule_missed\.reason must be one of"):
            store.missed()

    def test_buffer_one_keeps_one_waiting_session(self, store: Store) -> None:
        store.push("cron>: '* * * * *'\noverlap: buffer_one", now=T0)
        scheduler = Scheduler(store.engine)
        for n in (1, 2, 3):
            scheduler.tick(minute(n))
        states = store.attempt_states()
        assert (states[minute(1)], states[minute(2)]) == ("created", "waiting")
        assert minute(3) not in states
        store.finish_all()
        scheduler.tick(minute(3) + timedelta(seconds=1))
        assert store.attempt_states()[minute(2)] == "created"


class TestActivation:
    def test_a_paused_schedule_emits_nothing_and_resume_skips_the_paused_span(
        self, store: Store
    ) -> None:
        store.push("cron>: '* * * * *'", now=T0)
        scheduler = Scheduler(store.engine)
        scheduler.tick(minute(1))
        schedule_id = store.schedule().id
        with store.engine.begin() as conn:
            schedule_store.pause_schedule(conn, schedule_id, minute(1) + timedelta(seconds=30))
        assert run_until_idle(scheduler, minute(5)) == 0
        assert store.schedule().next_run_time is None
        with store.engine.begin() as conn:
            schedule_store.resume_schedule(conn, schedule_id, minute(5) + timedelta(seconds=30))
        run_until_idle(scheduler, minute(6))
        assert store.session_times() == [minute(1), minute(6)]
        assert store.missed() == []

    def test_resume_with_replay_runs_the_paused_span(self, store: Store) -> None:
        store.push("cron>: '* * * * *'", now=T0)
        scheduler = Scheduler(store.engine)
        schedule_id = store.schedule().id
        with store.engine.begin() as conn:
            schedule_store.pause_schedule(conn, schedule_id, T0 + timedelta(seconds=30))
            schedule_store.resume_schedule(
                conn, schedule_id, minute(3) + timedelta(seconds=30), replay=True
            )
        run_until_idle(scheduler, minute(3) + timedelta(seconds=30))
        assert store.session_times() == [minute(1), minute(2), minute(3)]

    def test_times_due_before_a_pause_still_run_after_scheduler_downtime(
        self, store: Store
    ) -> None:
        store.push("cron>: '* * * * *'", now=T0)
        schedule_id = store.schedule().id
        with store.engine.begin() as conn:
            schedule_store.pause_schedule(conn, schedule_id, minute(3) + timedelta(seconds=30))
        run_until_idle(Scheduler(store.engine), minute(10))
        assert store.session_times() == [minute(1), minute(2), minute(3)]

    def test_a_removed_workflow_keeps_the_times_due_while_it_existed(self, store: Store) -> None:
        store.push("cron>: '* * * * *'", now=T0)
        with store.engine.begin() as conn:
            row = schedule_store.find_schedule(conn, "proj", "wf")
            schedule_store.remove_schedules_except(
                conn, row.project_id, [], minute(2) + timedelta(seconds=1)
            )
        run_until_idle(Scheduler(store.engine), minute(10))
        assert store.session_times() == [minute(1), minute(2)]

    def test_a_workflow_added_back_gets_nothing_for_the_time_it_was_gone(
        self, store: Store
    ) -> None:
        store.push("cron>: '* * * * *'", now=T0)
        scheduler = Scheduler(store.engine)
        scheduler.tick(minute(1))
        store.push(None, now=minute(1) + timedelta(seconds=10))
        store.push("cron>: '* * * * *'", now=minute(5) + timedelta(seconds=10))
        run_until_idle(scheduler, minute(6))
        assert store.session_times() == [minute(1), minute(6)]

    def test_an_edited_schedule_applies_to_times_after_the_edit(self, store: Store) -> None:
        store.push("cron>: '*/10 * * * *'", now=T0)
        scheduler = Scheduler(store.engine)
        scheduler.tick(minute(10))
        store.push("cron>: '*/15 * * * *'", now=minute(12))
        run_until_idle(scheduler, minute(30))
        assert store.session_times() == [minute(10), minute(15), minute(30)]

    def test_skip_moves_past_the_next_times_and_records_them(self, store: Store) -> None:
        store.push("cron>: '0 * * * *'", now=T0)
        schedule_id = store.schedule().id
        with store.engine.begin() as conn:
            skipped = schedule_store.skip_schedule(conn, schedule_id, T0, count=2)
        assert skipped == [T0 + timedelta(hours=1), T0 + timedelta(hours=2)]
        run_until_idle(Scheduler(store.engine), T0 + timedelta(hours=3))
        assert store.session_times() == [T0 + timedelta(hours=3)]
        assert [(m[2], m[3]) for m in store.missed()] == [(2, "skipped")]


class TestFailures:
    def test_a_broken_schedule_is_retried_with_backoff_and_does_not_stall_others(
        self, store: Store
    ) -> None:
        store.push("cron>: '* * * * *'", now=T0, name="good")
        store.push("cron>: '* * * * *'", now=T0, name="bad")
        broken: dict[str, Any] = {
            "kind": "cron",
            "value": "x",
            "timezone": "Nowhere/City",
            "cron": "x",
        }
        with store.engine.begin() as conn:
            conn.execute(
                update(schedules).where(schedules.c.workflow_name == "bad").values(spec=broken)
            )
        report = Scheduler(store.engine).tick(minute(1))
        assert report.failures == 1
        assert store.session_times("good") == [minute(1)]
        bad = store.schedule("bad")
        assert bad.failures == 1 and bad.last_error
        assert bad.next_run_time is not None and bad.next_run_time > minute(1)
        assert bad.last_session_time == T0

    def test_a_batch_the_database_refuses_is_retried_schedule_by_schedule(
        self, store: Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # Given two schedules due together, one whose sessions the database refuses
        store.push("cron>: '* * * * *'", now=T0, name="good")
        store.push("cron>: '* * * * *'", now=T0, name="bad")
        insert = emission_store.insert_sessions

        def refuse_bad(conn: Any, new: Any, now: datetime) -> list[int]:
            if any(item.workflow_name == "bad" for item in new):
                raise OperationalError("INSERT", {}, Exception("refused"))
            return insert(conn, new, now)

        monkeypatch.setattr(emission_store, "insert_sessions", refuse_bad)
        # When a tick emits their batch
        report = Scheduler(store.engine).tick(minute(1))
        # Then the other one is emitted, and the refused one waits and is tried again
        assert (report.emitted, report.failures) == (1, 1)
        assert store.session_times("good") == [minute(1)]
        bad = store.schedule("bad")
        assert bad.failures == 1 and bad.last_error
        assert bad.next_run_time is not None and bad.next_run_time > minute(1)
        assert bad.last_session_time == T0


class TestBackfill:
    def test_a_backfill_creates_missing_sessions_one_after_another(self, store: Store) -> None:
        store.push("cron>: '0 * * * *'", now=T0)
        scheduler = Scheduler(store.engine)
        with store.engine.begin() as conn:
            row = schedule_store.find_schedule(conn, "proj", "wf")
            emission_store.insert_sessions(
                conn,
                [
                    emission_store.NewSession(
                        row.id,
                        row.project_id,
                        "wf",
                        T0 - timedelta(hours=2),
                        row.workflow_definition_id,
                        "UTC",
                        None,
                        AttemptState.SUCCESS,
                    )
                ],
                T0,
            )
            plan = emission_store.backfill(
                conn, row, T0 - timedelta(hours=3), T0 - timedelta(hours=1), T0
            )
        assert plan.created == [T0 - timedelta(hours=3), T0 - timedelta(hours=1)]
        assert plan.existing == [T0 - timedelta(hours=2)]
        states = store.attempt_states()
        assert states[T0 - timedelta(hours=3)] == "waiting"
        scheduler.tick(T0)
        assert store.attempt_states()[T0 - timedelta(hours=3)] == "created"
        assert store.attempt_states()[T0 - timedelta(hours=1)] == "waiting"
        store.finish_all()
        scheduler.tick(T0)
        assert store.attempt_states()[T0 - timedelta(hours=1)] == "created"


class TestMetrics:
    def test_emissions_misses_and_lag_are_counted(self, store: Store) -> None:
        store.push("cron>: '0 * * * *'\ncatchup: latest", now=T0 - timedelta(hours=3))
        scheduler = Scheduler(store.engine)
        run_until_idle(scheduler, T0 + timedelta(seconds=5))
        registry = scheduler.metrics.registry
        assert registry.get_sample_value("tickwork_scheduler_sessions_emitted_total") == 1
        missed = registry.get_sample_value("tickwork_scheduler_missed_total", {"reason": "catchup"})
        assert missed == 2
        lag_count = registry.get_sample_value("tickwork_scheduler_emission_lag_seconds_count")
        lag_sum = registry.get_sample_value("tickwork_scheduler_emission_lag_seconds_sum")
        assert lag_count == 1
        assert lag_sum is not None and 5.0 <= lag_sum < 10.0  # 5 s late, plus the batch's work
        assert registry.get_sample_value("tickwork_scheduler_due_schedules") == 0
