"""The schedule commands as a user meets them: ``schedules preview``, ``check``, ``backfill``
and ``schedules list|pause|resume|skip|missed``, each a real subprocess asking a
``tickwork api`` that serves a throwaway store."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.e2e._scheduling import (
    Command,
    push_workflows,
    scheduler_processes,
    stored_sessions,
    tickwork,
)
from tests.e2e._standalone import running_api
from tests.support.waiting import wait_until
from tickwork.shared.domain.schedule import parse_schedule

pytestmark = pytest.mark.e2e

PROJECT = "proj"
WORKFLOW = "etl"
# Sessions at 07:00 in Tokyo: 2026-01-01T07:00:00+09:00 is 2025-12-31T22:00:00Z.
SCHEDULED = """
    timezone: Asia/Tokyo
    schedule:
      cron>: "0 7 * * *"
    +extract:
      echo>: extracting
"""
JANUARY_1_TO_3 = ("--from", "2026-01-01", "--to", "2026-01-03T23:59:59")
JANUARY_1_TO_3_SESSIONS = [
    "2026-01-01T07:00:00+09:00",
    "2026-01-02T07:00:00+09:00",
    "2026-01-03T07:00:00+09:00",
]


def write(directory: Path, name: str, text: str) -> Path:
    """Write a workflow file; indented text is dedented."""
    path = directory / name
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return path


@pytest.fixture
def store(sqlite_url: str, tmp_path: Path) -> str:
    """A SQLite store holding project ``proj`` with workflow ``etl`` scheduled daily at 07:00."""
    push_workflows(sqlite_url, PROJECT, {WORKFLOW: SCHEDULED}, project_dir=tmp_path)
    return sqlite_url


@pytest.fixture
def api(store: str, tmp_path: Path) -> Iterator[str]:
    """The endpoint of a ``tickwork api`` serving ``store`` (no scheduler runs beside it)."""
    with running_api(store, tmp_path / "api") as process:
        yield process.endpoint


def listed(endpoint: str, *args: str) -> list[dict[str, Any]]:
    """``tickwork schedules ARGS``'s JSON lines, parsed."""
    command = tickwork("schedules", *args, endpoint=endpoint)
    assert command.exit_code == 0, command.explain()
    return [json.loads(line) for line in command.lines]


def session_times(database_url: str) -> list[str]:
    """The stored session times of proj/etl, as ISO 8601 in Tokyo."""
    spec = parse_schedule({"cron>": "0 7 * * *"}, "Asia/Tokyo")
    found = stored_sessions(database_url, PROJECT).get(WORKFLOW, [])
    return [spec.local(session.session_time).isoformat() for session in found]


def assert_one_line_error(command: Command, *words: str, status: int = 2) -> None:
    """Exit ``status`` (2: invalid input), nothing on stdout, one line on stderr naming
    ``words``, no traceback."""
    assert command.exit_code == status, command.explain()
    assert command.stdout == "", command.explain()
    assert len(command.stderr.splitlines()) == 1, command.explain()
    assert "Traceback" not in command.stderr
    for word in words:
        assert word in command.stderr, command.explain()


class TestPreview:
    def test_a_cron_preview_prints_session_times_in_the_given_zone(self) -> None:
        # When the next three weekday 07:00s in Tokyo after 2026-01-01 are previewed
        command = tickwork(
            "schedules",
            "preview",
            "--cron",
            "0 7 * * 1-5",
            "--timezone",
            "Asia/Tokyo",
            "--from",
            "2026-01-01",
            "--count",
            "3",
        )

        # Then there are three ISO 8601 lines with the zone's offset, skipping the weekend
        assert command.exit_code == 0, command.explain()
        assert command.lines == [
            "2026-01-01T07:00:00+09:00",
            "2026-01-02T07:00:00+09:00",
            "2026-01-05T07:00:00+09:00",
        ]

    def test_a_workflow_preview_prints_the_session_time_then_when_it_runs(
        self, tmp_path: Path
    ) -> None:
        # Given a workflow scheduled daily at 07:00 (Digdag's form: session time midnight)
        path = write(
            tmp_path,
            "daily.dig",
            """
            timezone: Asia/Tokyo
            schedule:
              daily>: 07:00:00
            +extract:
              echo>: extracting
            """,
        )

        # When its next two sessions are previewed
        command = tickwork(
            "schedules", "preview", str(path), "--from", "2026-01-01", "--count", "2"
        )

        # Then each line is the session time, then the run time
        assert command.exit_code == 0, command.explain()
        assert command.lines == [
            "2026-01-02T00:00:00+09:00  runs at 2026-01-02T07:00:00+09:00",
            "2026-01-03T00:00:00+09:00  runs at 2026-01-03T07:00:00+09:00",
        ]

    def test_a_preview_in_another_zone_keeps_the_jitter_and_every_other_option(
        self, tmp_path: Path
    ) -> None:
        # Given a workflow run daily at 07:00 in Tokyo, jittered by up to an hour
        path = write(
            tmp_path,
            "jittered.dig",
            """
            timezone: Asia/Tokyo
            schedule:
              daily>: 07:00:00
              jitter: 1h
              overlap: skip
            +extract:
              echo>: extracting
            """,
        )

        # When its next three sessions are previewed in UTC
        command = tickwork(
            "schedules", "preview", str(path), "--timezone", "UTC",
            "--from", "2026-01-01", "--count", "3",
        )  # fmt: skip

        # Then each runs at the time the scheduler draws for project/workflow, jitter included
        assert command.exit_code == 0, command.explain()
        spec = parse_schedule({"daily>": "07:00:00", "jitter": "1h", "overlap": "skip"}, "UTC")
        seed = f"{tmp_path.name}/jittered"
        sessions = spec.session_times(datetime.fromisoformat("2026-01-01T00:00:00+00:00"), 3)
        runs = [spec.run_time(session, seed) for session in sessions]
        assert command.lines == [
            f"{session:%Y-%m-%dT%H:%M:%SZ}  runs at {run:%Y-%m-%dT%H:%M:%SZ}"
            for session, run in zip(sessions, runs, strict=True)
        ]
        assert any(
            run != spec.delayed(session) for session, run in zip(sessions, runs, strict=True)
        )

    @pytest.mark.parametrize(
        ("args", "words"),
        [
            (["--cron", "0 7 * *"], ["--cron", "5 fields"]),
            (["--cron", "* * * * * *"], ["--cron", "5 fields"]),
            (["--cron", "0 0 30 2 *"], ["--cron", "never fires"]),
            (["--cron", "61 * * * *"], ["--cron", "61"]),
            (["--cron", "0 7 * * *", "--timezone", "Mars/Base"], ["--timezone", "Mars/Base"]),
        ],
        ids=["four-fields", "six-fields", "never-fires", "minute-61", "unknown-time-zone"],
    )
    def test_an_invalid_spec_exits_2_with_one_line_naming_the_problem(
        self, args: list[str], words: list[str]
    ) -> None:
        command = tickwork("schedules", "preview", *args)

        assert_one_line_error(command, *words)

    def test_an_unknown_time_zone_for_a_workflow_exits_2_naming_it(self, tmp_path: Path) -> None:
        path = write(tmp_path, "daily.dig", "schedule:\n  daily>: 07:00:00\n+a:\n  echo>: a\n")

        command = tickwork("schedules", "preview", str(path), "--timezone", "Nowhere/Land")

        assert_one_line_error(command, "--timezone", "Nowhere/Land")


class TestCheck:
    def test_check_shows_the_next_five_session_times(self, tmp_path: Path) -> None:
        # Given a workflow scheduled at 07:00 on weekdays in Tokyo
        path = write(
            tmp_path,
            "weekdays.dig",
            """
            timezone: Asia/Tokyo
            schedule:
              cron>: "0 7 * * 1-5"
            +extract:
              echo>: extracting
            """,
        )

        # When it is checked
        command = tickwork("check", str(path))

        # Then it is valid, and the next five session times follow, in order, on weekdays
        assert command.exit_code == 0, command.explain()
        lines = command.lines
        assert lines[0].startswith(f"{path}: ok (") and "timezone Asia/Tokyo" in lines[0]
        assert lines[1:3] == ["  schedule cron>: 0 7 * * 1-5 (Asia/Tokyo)", "  next session times:"]
        times = [datetime.fromisoformat(line.strip()) for line in lines[3:]]
        assert len(times) == 5, command.stdout
        assert times == sorted(set(times))
        assert all(t.isoformat().endswith("T07:00:00+09:00") for t in times), command.stdout
        assert all(t.isoweekday() <= 5 for t in times), command.stdout


class TestBackfill:
    def test_a_dry_run_lists_the_times_and_creates_nothing(self, store: str, api: str) -> None:
        command = tickwork(
            "backfill", PROJECT, WORKFLOW, *JANUARY_1_TO_3, "--dry-run", endpoint=api
        )

        assert command.exit_code == 0, command.explain()
        assert command.lines == [
            *(f"would create {time}" for time in JANUARY_1_TO_3_SESSIONS),
            "would create 3 session(s), one after another; 0 existed",
        ]
        assert session_times(store) == []

    def test_a_backfill_creates_one_session_per_time_that_a_scheduler_runs_one_by_one(
        self, store: str, api: str, tmp_path: Path
    ) -> None:
        # When a range is backfilled
        command = tickwork("backfill", PROJECT, WORKFLOW, *JANUARY_1_TO_3, endpoint=api)

        # Then it creates one session per scheduled time in the range, all waiting
        assert command.exit_code == 0, command.explain()
        assert command.lines[-1] == "created 3 session(s), one after another; 0 existed"
        assert session_times(store) == JANUARY_1_TO_3_SESSIONS
        assert self.attempt_states(store) == [("waiting",)] * 3

        # When a scheduler runs
        with scheduler_processes(store, tmp_path) as schedulers:
            scheduler = schedulers.start("scheduler")
            wait_until(
                "the scheduler started the backfill's first session",
                lambda: self.attempt_states(store)[0] == ("created",),
                timeout_seconds=20,
            )
            assert schedulers.terminate(scheduler) == 0, schedulers.log("scheduler")

        # Then only the oldest is released; the others wait for it to finish
        assert self.attempt_states(store) == [("created",), ("waiting",), ("waiting",)]

    def test_a_backfill_again_keeps_the_sessions_that_exist(self, store: str, api: str) -> None:
        # Given a backfilled range
        first = tickwork("backfill", PROJECT, WORKFLOW, *JANUARY_1_TO_3, endpoint=api)
        assert first.exit_code == 0, first.explain()

        # When the same range is backfilled again, and then a wider one
        again = tickwork("backfill", PROJECT, WORKFLOW, *JANUARY_1_TO_3, endpoint=api)
        wider = tickwork(
            "backfill",
            PROJECT,
            WORKFLOW,
            "--from",
            "2026-01-01",
            "--to",
            "2026-01-04T07:00:00+09:00",
            endpoint=api,
        )

        # Then the first creates nothing and the second only the new time
        assert again.lines == ["created 0 session(s), one after another; 3 existed"]
        assert wider.lines == [
            "created 2026-01-04T07:00:00+09:00",
            "created 1 session(s), one after another; 3 existed",
        ]
        assert session_times(store) == [*JANUARY_1_TO_3_SESSIONS, "2026-01-04T07:00:00+09:00"]
        assert all(len(states) == 1 for states in self.attempt_states(store))

    @staticmethod
    def attempt_states(database_url: str) -> list[tuple[str, ...]]:
        found = stored_sessions(database_url, PROJECT).get(WORKFLOW, [])
        return [session.attempt_states for session in found]


class TestSchedules:
    def test_list_shows_the_schedule_as_a_table_or_json(self, store: str, api: str) -> None:
        table = tickwork("schedules", "list", endpoint=api)
        (row,) = listed(api, "list", "--json")

        assert table.exit_code == 0, table.explain()
        assert PROJECT in table.stdout and WORKFLOW in table.stdout
        assert (row["project"], row["workflow"], row["schedule"]) == (
            PROJECT,
            WORKFLOW,
            "cron>: 0 7 * * *",
        )
        assert (row["timezone"], row["paused"], row["failures"]) == ("Asia/Tokyo", False, 0)

    def test_schedules_alone_lists_them(self, store: str, api: str) -> None:
        table = tickwork("schedules", endpoint=api)

        assert table.exit_code == 0, table.explain()
        assert PROJECT in table.stdout and WORKFLOW in table.stdout
        assert listed(api, "--json") == listed(api, "list", "--json")

    def test_pause_then_resume_show_in_the_listing(self, store: str, api: str) -> None:
        # When the schedule is paused
        paused = tickwork("schedules", "pause", PROJECT, WORKFLOW, endpoint=api)

        # Then the listing says so, and pausing again changes nothing
        assert paused.lines == ["proj/etl: paused"], paused.explain()
        assert [row["paused"] for row in listed(api, "list", "--json")] == [True]
        again = tickwork("schedules", "pause", PROJECT, WORKFLOW, endpoint=api)
        assert again.lines == ["proj/etl: was already paused"], again.explain()

        # When it is resumed
        resumed = tickwork("schedules", "resume", PROJECT, WORKFLOW, endpoint=api)

        # Then it is active again
        assert resumed.lines == ["proj/etl: resumed"], resumed.explain()
        assert [row["paused"] for row in listed(api, "list", "--json")] == [False]

    def test_skip_moves_the_checkpoint_past_the_skipped_times_and_records_them(
        self, api: str
    ) -> None:
        # Given the schedule's checkpoint (its creation time: nothing emitted yet)
        (before,) = listed(api, "list", "--json")
        spec = parse_schedule({"cron>": "0 7 * * *"}, "Asia/Tokyo")
        upcoming = spec.session_times(datetime.fromisoformat(before["checkpoint"]), 2)
        first, second = (spec.local(t).isoformat() for t in upcoming)

        # When the next two session times are skipped
        skipped = tickwork("schedules", "skip", PROJECT, WORKFLOW, "--count", "2", endpoint=api)

        # Then the checkpoint is the second of them, and both are recorded as missed
        assert skipped.lines == [f"proj/etl: skipped 2 session time(s), {first} .. {second}"]
        (after,) = listed(api, "list", "--json")
        assert after["checkpoint"] == second
        missed = tickwork("schedules", "missed", PROJECT, WORKFLOW, endpoint=api)
        assert missed.lines == [f"{first} .. {second}  2 time(s)  skipped"], missed.explain()

    @pytest.mark.parametrize(
        "args",
        [
            ["schedules", "pause", "nope", WORKFLOW],
            ["schedules", "resume", PROJECT, "nope"],
            ["schedules", "skip", PROJECT, "nope", "--count", "1"],
            ["schedules", "missed", "nope", WORKFLOW],
            ["backfill", "nope", WORKFLOW, *JANUARY_1_TO_3],
            ["backfill", PROJECT, "nope", *JANUARY_1_TO_3, "--dry-run"],
        ],
        ids=["pause", "resume", "skip", "missed", "backfill-project", "backfill-workflow"],
    )
    def test_an_unknown_project_or_workflow_exits_3_naming_it(
        self, store: str, api: str, args: list[str]
    ) -> None:
        command = tickwork(*args, endpoint=api)

        assert_one_line_error(command, "error:", "'nope'", status=3)
        assert session_times(store) == []

    @pytest.mark.parametrize(
        ("args", "hint"),
        [
            (["schedules", "pause", "porj", WORKFLOW], "(did you mean 'proj'?)"),
            (["schedules", "missed", PROJECT, "elt"], "(did you mean 'etl'?)"),
        ],
        ids=["project", "workflow"],
    )
    def test_a_typo_in_a_name_exits_3_with_the_closest_scheduled_one(
        self, api: str, args: list[str], hint: str
    ) -> None:
        command = tickwork(*args, endpoint=api)

        assert_one_line_error(command, "error:", hint, status=3)

    @pytest.mark.parametrize(
        ("args", "option"),
        [
            (
                [
                    "backfill",
                    PROJECT,
                    WORKFLOW,
                    "--from",
                    "0001-01-01T00:00Z",
                    "--to",
                    "2026-01-01",
                ],
                "--from",
            ),
            (["schedules", "skip", PROJECT, WORKFLOW, "--to", ""], "--to"),
            (["schedules", "skip", PROJECT, WORKFLOW, "--to", "9999-12-31T23:00"], "--to"),
        ],
        ids=["backfill-from-year-1", "skip-to-empty", "skip-to-year-10000"],
    )
    def test_a_time_outside_the_calendar_every_zone_shows_exits_2_naming_it(
        self, store: str, api: str, args: list[str], option: str
    ) -> None:
        command = tickwork(*args, endpoint=api)

        # exit status 2: one line naming the option, no traceback
        assert_one_line_error(command, f"error: {option}:", status=2)
        assert session_times(store) == []
        missed = tickwork("schedules", "missed", PROJECT, WORKFLOW, endpoint=api)
        assert missed.exit_code == 0 and "skipped" not in missed.stdout, missed.explain()
