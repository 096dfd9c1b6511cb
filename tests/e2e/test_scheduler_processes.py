"""``tickwork scheduler`` processes against one PostgreSQL: replicas, a crash, downtime, SIGTERM.

Each test checks the stored sessions afterwards: one per scheduled time, none missing,
each with exactly one attempt.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.e2e._scheduling import (
    StoredSession,
    push_workflows,
    scheduler_processes,
    stored_sessions,
    tickwork,
)
from tests.e2e._standalone import running_api
from tests.support.waiting import wait_until
from tickwork.shared.clock import utc_now
from tickwork.shared.domain.schedule import DEFAULT_MAX_ACTIVE

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROJECT = "soak"
EVERY_SECOND = tuple(f"every_second_{n}" for n in range(1, 6))
EVERY_MINUTE = "every_minute"
RUN_SECONDS = 36
KILL_AFTER_SECONDS = RUN_SECONDS // 2
LAG_SECONDS = 5
"""How far behind the clock a live scheduler may be when it is stopped."""


def workflow(cron: str) -> str:
    """A one-task workflow scheduled by ``cron>: CRON``."""
    return f'schedule:\n  cron>: "{cron}"\n+noop:\n  echo>: tick\n'


def first_second_after(instant: datetime) -> datetime:
    """The first whole second strictly after ``instant``."""
    return instant.replace(microsecond=0) + timedelta(seconds=1)


def minutes_between(after: datetime, until: datetime) -> list[datetime]:
    """Whole minutes in ``(after, until]``."""
    minute = after.replace(second=0, microsecond=0) + timedelta(minutes=1)
    found = []
    while minute <= until:
        found.append(minute)
        minute += timedelta(minutes=1)
    return found


def assert_every_second(
    found: Sequence[StoredSession], first: datetime, at_least: datetime
) -> None:
    """Sessions at every whole second from ``first`` on, through ``at_least`` or later."""
    times = [session.session_time for session in found]
    assert times, "no session was emitted"
    expected = [first + timedelta(seconds=n) for n in range(len(times))]
    assert times == expected, f"duplicates or gaps: {sorted(set(expected) ^ set(times))[:10]}"
    assert times[-1] >= at_least, f"the last session is {times[-1]}, expected {at_least} or later"


def assert_one_attempt_each(found: Sequence[StoredSession]) -> None:
    """Every session has exactly one attempt, and at most ``max_active`` of them may start.

    No executor runs here, so the first 16 (the default ``max_active``) stay ``created``
    and the rest ``waiting``, however many schedulers emitted them.
    """
    extra = [s for s in found if len(s.attempt_states) != 1]
    assert not extra, f"sessions without exactly one attempt: {extra[:5]}"
    states = [s.attempt_states[0] for s in found]
    created = min(len(found), DEFAULT_MAX_ACTIVE)
    assert states == ["created"] * created + ["waiting"] * (len(found) - created), states


def assert_minutes(found: Sequence[StoredSession], created: datetime, stopped: datetime) -> None:
    """One session per minute boundary since ``created``; only a last one near ``stopped``
    (when the scheduler may not have reached it yet) may be missing."""
    times = [session.session_time for session in found]
    assert len(times) == len(set(times)), f"duplicate minutes: {times}"
    assert set(minutes_between(created, stopped - timedelta(seconds=LAG_SECONDS))) <= set(times)
    assert set(times) <= set(minutes_between(created, stopped)), times


class TestTwoSchedulers:
    @pytest.mark.timeout(RUN_SECONDS + 60)
    def test_two_schedulers_never_emit_a_session_twice_nor_leave_a_gap_when_one_is_killed(
        self, postgres_url: str, tmp_path: Path
    ) -> None:
        # Given five every-second schedules and an every-minute one, created now
        workflows = {name: workflow("@every 1s") for name in EVERY_SECOND}
        workflows[EVERY_MINUTE] = workflow("* * * * *")
        created = push_workflows(postgres_url, PROJECT, workflows, project_dir=tmp_path)

        with scheduler_processes(postgres_url, tmp_path) as schedulers:
            # When two schedulers run side by side for RUN_SECONDS
            started = time.monotonic()
            first = schedulers.start("first")
            second = schedulers.start("second")
            time.sleep(KILL_AFTER_SECONDS)
            # and the first, once it has emitted sessions, is SIGKILLed and replaced
            wait_until(
                "the first scheduler emitted sessions (else killing it proves nothing)",
                lambda: "emitted" in schedulers.log("first"),
                timeout_seconds=10,
            )
            assert first.poll() is None, schedulers.log("first")
            first.kill()
            first.wait(timeout=5)
            replacement = schedulers.start("replacement")
            time.sleep(max(0.0, started + RUN_SECONDS - time.monotonic()))
            stopped = utc_now()
            exit_codes = [schedulers.terminate(p) for p in (second, replacement)]

        # Then the survivors stop cleanly
        assert exit_codes == [0, 0], schedulers.log("second") + schedulers.log("replacement")
        assert "Traceback" not in schedulers.log("first") + schedulers.log("second")
        # and every schedule has one session per scheduled time, none missing, up to the end
        found = stored_sessions(postgres_url, PROJECT)
        assert set(found) <= {*EVERY_SECOND, EVERY_MINUTE}
        for name in EVERY_SECOND:
            assert_every_second(
                found.get(name, []),
                first=first_second_after(created),
                at_least=stopped.replace(microsecond=0) - timedelta(seconds=LAG_SECONDS),
            )
            assert_one_attempt_each(found[name])
        # and the every-minute schedule fired once at each minute boundary the run spanned
        assert_minutes(found.get(EVERY_MINUTE, []), created, stopped)
        assert_one_attempt_each(found.get(EVERY_MINUTE, []))


class TestDowntime:
    @pytest.mark.timeout(60)
    def test_a_scheduler_started_after_downtime_catches_up_then_stops_on_sigterm(
        self, postgres_url: str, tmp_path: Path
    ) -> None:
        # Given schedules created ten minutes ago, when no scheduler was running
        down_since = (utc_now() - timedelta(minutes=10)).astimezone(UTC)
        workflows = {"every_second": workflow("@every 1s"), EVERY_MINUTE: workflow("* * * * *")}
        push_workflows(postgres_url, PROJECT, workflows, project_dir=tmp_path, now=down_since)

        with scheduler_processes(postgres_url, tmp_path) as schedulers:
            # When a scheduler starts
            late = schedulers.start("late")
            wait_until(
                "the scheduler caught up ten minutes of every-second sessions",
                lambda: len(stored_sessions(postgres_url, PROJECT).get("every_second", [])) >= 600,
                timeout_seconds=30,
            )
            # and is sent SIGTERM
            stopping = time.monotonic()
            exit_code = schedulers.terminate(late)
            stop_seconds = time.monotonic() - stopping
            stopped = utc_now()

        # Then it exits cleanly within a few seconds
        assert exit_code == 0, schedulers.log("late")
        assert stop_seconds < 5, stop_seconds
        assert "Traceback" not in schedulers.log("late")
        # and every time due while it was down was emitted once, with one attempt
        found = stored_sessions(postgres_url, PROJECT)
        assert_every_second(
            found["every_second"],
            first=first_second_after(down_since),
            # The wait above ends at the 600th session: the last whole second of the ten minutes.
            at_least=(down_since + timedelta(minutes=10)).replace(microsecond=0),
        )
        assert_one_attempt_each(found["every_second"])
        assert_minutes(found[EVERY_MINUTE], down_since, stopped)
        assert len(found[EVERY_MINUTE]) >= 10
        assert_one_attempt_each(found[EVERY_MINUTE])
        # and nothing was recorded as missed (catch-up `all` within the 24-hour window)
        with running_api(postgres_url, tmp_path / "api") as api:
            missed = tickwork("schedules", "missed", PROJECT, "every_second", endpoint=api.endpoint)
        assert (missed.exit_code, missed.stdout) == (
            0,
            f"{PROJECT}/every_second: no missed session times\n",
        ), missed.explain()
