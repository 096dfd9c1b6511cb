"""Specification of schedule specs: the accepted forms, their errors and session times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from shared.domain.schedule import (
    ScheduleSpec,
    parse_schedule,
    resolve_timezone,
)
from shared.errors import InvalidSchedule

TOKYO = ZoneInfo("Asia/Tokyo")
LOS_ANGELES = ZoneInfo("America/Los_Angeles")


def rejected(raw: Any, timezone: str = "UTC") -> InvalidSchedule:
    with pytest.raises(InvalidSchedule) as caught:
        parse_schedule(raw, timezone)
    return caught.value


class TestForms:
    @pytest.mark.parametrize(
        ("raw", "cron", "delay_seconds"),
        [
            ({"cron>": "*/15 9-17 * * 1-5"}, "*/15 9-17 * * 1-5", 0),
            ({"cron>": "0 3 * * *", "delay": 90}, "0 3 * * *", 90),
            ({"cron>": "@hourly"}, "0 * * * *", 0),
            ({"cron>": "@daily"}, "0 0 * * *", 0),
            ({"cron>": "@midnight"}, "0 0 * * *", 0),
            ({"cron>": "@weekly"}, "0 0 * * 0", 0),
            ({"cron>": "@monthly"}, "0 0 1 * *", 0),
            ({"cron>": "@yearly"}, "0 0 1 1 *", 0),
            ({"cron>": "0 0 L * *"}, "0 0 L * *", 0),
            ({"hourly>": "30:15"}, "0 * * * *", 30 * 60 + 15),
            ({"daily>": "07:00:00"}, "0 0 * * *", 7 * 3600),
            ({"daily>": "23:59:59"}, "0 0 * * *", 86399),
            ({"weekly>": "Sun,09:00:00"}, "0 0 * * 0", 9 * 3600),
            ({"weekly>": "fri,00:00:30"}, "0 0 * * 5", 30),
            ({"weekly>": "SATURDAY,01:00:00"}, "0 0 * * 6", 3600),
            ({"weekly>": "3,01:00:00"}, "0 0 * * 3", 3600),
            ({"monthly>": "15,10:30:00"}, "0 0 15 * *", 10 * 3600 + 1800),
            ({"minutes_interval>": 20}, "*/20 * * * *", 0),
            ({"minutes_interval>": "5", "delay": 10}, "*/5 * * * *", 10),
        ],
    )
    def test_each_form_compiles_to_a_cron_of_session_times_and_a_delay(
        self, raw: dict[str, Any], cron: str, delay_seconds: int
    ) -> None:
        spec = parse_schedule(raw, "UTC")
        assert (spec.cron, spec.delay_seconds) == (cron, delay_seconds)
        assert spec.kind == next(iter(raw))[:-1]

    def test_start_and_end_dates_are_kept(self) -> None:
        spec = parse_schedule(
            {"daily>": "01:00:00", "start": "2024-01-01", "end": "2024-12-31"}, "UTC"
        )
        assert (spec.start, spec.end) == ("2024-01-01", "2024-12-31")

    def test_the_time_zone_is_kept(self) -> None:
        assert parse_schedule({"daily>": "01:00:00"}, "Asia/Tokyo").timezone == "Asia/Tokyo"

    def test_a_whole_hour_utc_offset_becomes_an_etc_zone(self) -> None:
        assert resolve_timezone("+09:00") == "Etc/GMT-9"
        assert resolve_timezone("-05:00") == "Etc/GMT+5"
        assert resolve_timezone("+00:00") == "UTC"

    def test_config_round_trips(self) -> None:
        spec = parse_schedule({"cron>": "0 3 * * *", "delay": 5, "start": "2024-02-01"}, "UTC")
        assert ScheduleSpec.from_config(spec.to_config()) == spec
        assert spec.to_config() == {
            "kind": "cron",
            "value": "0 3 * * *",
            "timezone": "UTC",
            "cron": "0 3 * * *",
            "delay_seconds": 5,
            "start": "2024-02-01",
        }


class TestInvalidSchedules:
    @pytest.mark.parametrize(
        ("raw", "key", "message"),
        [
            (
                {"cron>": "0 0 * * * *"},
                "cron>",
                "cron '0 0 * * * *' must have 5 fields "
                "(minute hour day-of-month month day-of-week), got 6",
            ),
            ({"cron>": "0 0 30 2 *"}, "cron>", "cron '0 0 30 2 *' never fires"),
            ({"cron>": "0 0 31 4 *"}, "cron>", "cron '0 0 31 4 *' never fires"),
            ({"cron>": "H * * * *"}, "cron>", "cron 'H * * * *' has an invalid field 'H'"),
            (
                {"cron>": "@every 1h"},
                "cron>",
                "unknown cron alias '@every 1h' (use one of @hourly, @daily, @midnight, "
                "@weekly, @monthly, @yearly, @annually)",
            ),
            ({"daily>": "25:00:00"}, "daily>", "'daily>' has an out-of-range time '25:00:00'"),
            ({"daily>": "7:00"}, "daily>", "'daily>' must look like HH:MM:SS, got '7:00'"),
            ({"hourly>": "60:00"}, "hourly>", "'hourly>' has an out-of-range time '60:00'"),
            (
                {"weekly>": "Sunn,01:00:00"},
                "weekly>",
                "'weekly>' needs a weekday Sun..Sat, got 'Sunn'",
            ),
            (
                {"monthly>": "32,01:00:00"},
                "monthly>",
                "'monthly>' needs a day of the month 1..31, got '32'",
            ),
            (
                {"minutes_interval>": 90},
                "minutes_interval>",
                "'minutes_interval>' must be a number of minutes 1..59 (use hourly> for longer), "
                "got '90'",
            ),
            (
                {"dayly>": "07:00:00"},
                "dayly>",
                "unknown schedule 'dayly>' (did you mean 'daily>'?)",
            ),
            (
                {"daily>": "07:00:00", "hourly>": "00:00"},
                "hourly>",
                "'schedule' has two forms: 'daily>' and 'hourly>'",
            ),
            (
                {"delay": 5},
                "",
                "'schedule' needs one of cron>, hourly>, daily>, weekly>, monthly>, "
                "minutes_interval>",
            ),
            (
                {"daily>": "07:00:00", "delay": 5},
                "delay",
                "'delay' is only valid with cron> or minutes_interval>",
            ),
            (
                {"cron>": "0 * * * *", "delay": -1},
                "delay",
                "'delay' must be a whole number of seconds >= 0",
            ),
            (
                {"daily>": "01:00:00", "dela": 1},
                "dela",
                "unknown schedule option 'dela' (did you mean 'delay'?)",
            ),
            (
                {"daily>": "01:00:00", "start": "2024-13-01"},
                "start",
                "'start' must be a date YYYY-MM-DD, got '2024-13-01'",
            ),
            (
                {"daily>": "01:00:00", "start": "2024-02-01", "end": "2024-01-01"},
                "end",
                "'end' (2024-01-01) is before 'start' (2024-02-01)",
            ),
            ({"daily>": ["07:00:00"]}, "daily>", "'daily>' must be a string, got ['07:00:00']"),
        ],
    )
    def test_a_bad_schedule_is_rejected_naming_the_key(
        self, raw: dict[str, Any], key: str, message: str
    ) -> None:
        error = rejected(raw)
        assert (error.key, error.message) == (key, message)

    def test_an_unknown_time_zone_is_rejected_with_a_suggestion(self) -> None:
        error = rejected({"daily>": "01:00:00"}, "Asia/Tokio")
        assert error.key == "timezone"
        assert error.message == "unknown timezone 'Asia/Tokio' (did you mean 'Asia/Tokyo'?)"

    def test_a_path_is_not_a_time_zone(self) -> None:
        assert rejected({"daily>": "01:00:00"}, "../../etc/passwd").key == "timezone"


class TestSessionTimes:
    def test_daily_session_time_is_midnight_not_the_run_time(self) -> None:
        spec = parse_schedule({"daily>": "07:00:00"}, "UTC")
        now = datetime(2016, 1, 2, 3, 4, 5, tzinfo=UTC)
        assert spec.last_session_time(now) == datetime(2016, 1, 2, tzinfo=UTC)
        assert spec.run_time(spec.last_session_time(now)) == datetime(2016, 1, 2, 7, tzinfo=UTC)

    def test_a_session_time_equal_to_now_is_the_last_one(self) -> None:
        spec = parse_schedule({"cron>": "*/15 * * * *"}, "UTC")
        now = datetime(2024, 5, 1, 10, 30, tzinfo=UTC)
        assert spec.last_session_time(now) == now
        assert spec.next_session_time(now) == now + timedelta(minutes=15)

    def test_session_times_are_computed_and_returned_in_the_schedule_zone(self) -> None:
        spec = parse_schedule({"daily>": "07:00:00"}, "Asia/Tokyo")
        now = datetime(2024, 5, 1, 16, 0, tzinfo=UTC)  # 01:00 on May 2nd in Tokyo
        last = spec.last_session_time(now)
        assert last == datetime(2024, 5, 2, tzinfo=TOKYO)
        assert last.utcoffset() == timedelta(hours=9)

    def test_daylight_saving_days_keep_local_midnight(self) -> None:
        spec = parse_schedule({"cron>": "@daily"}, "America/Los_Angeles")
        now = datetime(2024, 3, 10, 20, 0, tzinfo=UTC)  # noon PDT, the day clocks sprang forward
        assert spec.last_session_time(now) == datetime(2024, 3, 10, tzinfo=LOS_ANGELES)
        assert spec.next_session_time(now) == datetime(2024, 3, 11, tzinfo=LOS_ANGELES)

    def test_weekly_and_monthly_sessions_start_their_period(self) -> None:
        now = datetime(2024, 5, 15, 12, 0, tzinfo=UTC)  # a Wednesday
        weekly = parse_schedule({"weekly>": "Mon,09:00:00"}, "UTC")
        monthly = parse_schedule({"monthly>": "1,09:00:00"}, "UTC")
        assert weekly.last_session_time(now) == datetime(2024, 5, 13, tzinfo=UTC)
        assert monthly.last_session_time(now) == datetime(2024, 5, 1, tzinfo=UTC)

    def test_hourly_and_minutes_interval_sessions(self) -> None:
        now = datetime(2024, 5, 15, 12, 47, 30, tzinfo=UTC)
        hourly = parse_schedule({"hourly>": "10:00"}, "UTC")
        every_20 = parse_schedule({"minutes_interval>": 20}, "UTC")
        assert hourly.last_session_time(now) == datetime(2024, 5, 15, 12, tzinfo=UTC)
        assert every_20.last_session_time(now) == datetime(2024, 5, 15, 12, 40, tzinfo=UTC)

    def test_a_naive_now_is_refused(self) -> None:
        spec = parse_schedule({"cron>": "@daily"}, "UTC")
        with pytest.raises(TypeError):
            spec.last_session_time(datetime(2024, 1, 1))
