"""Specification of schedule specs: the accepted forms, their errors and session times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tickwork.shared.domain.instants import LATEST
from tickwork.shared.domain.schedule import (
    ScheduleSpec,
    parse_schedule,
    resolve_timezone,
)
from tickwork.shared.errors import InvalidSchedule

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
                {"cron>": "@reboot"},
                "cron>",
                "unknown cron alias '@reboot' (use one of @hourly, @daily, @midnight, "
                "@weekly, @monthly, @yearly, @annually, @every <period>)",
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
                "'delay' must be at least 0s, got -1",
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

    def test_session_times_are_computed_in_the_schedule_zone_and_returned_in_utc(self) -> None:
        spec = parse_schedule({"daily>": "07:00:00"}, "Asia/Tokyo")
        now = datetime(2024, 5, 1, 16, 0, tzinfo=UTC)  # 01:00 on May 2nd in Tokyo
        last = spec.last_session_time(now)
        assert last == datetime(2024, 5, 2, tzinfo=TOKYO)
        assert last is not None and last.tzinfo is UTC
        assert spec.local(last).isoformat() == "2024-05-02T00:00:00+09:00"

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


class TestValidation:
    @pytest.mark.parametrize(
        ("raw", "key", "message"),
        [
            ({"cron>": "0 0 * *"}, "cron>", "cron '0 0 * *' must have 5 fields"),
            ({"cron>": "61 * * * *"}, "cron>", "invalid cron '61 * * * *'"),
            ({"cron>": "*/0 * * * *"}, "cron>", "invalid cron '*/0 * * * *'"),
            ({"cron>": "0 0 * * MON#6"}, "cron>", "invalid cron '0 0 * * MON#6'"),
            ({"cron>": "0 0 ? * *"}, "cron>", "has an invalid field '?'"),
            (
                {"cron>": "0 0 29 2 *", "start": "2025-01-01", "end": "2027-12-31"},
                "end",
                "never fires between",
            ),
            ({"daily>": "01:00:00", "start": "10000-01-01"}, "start", "got '10000-01-01'"),
            ({"daily>": "01:00:00", "end": "10000-01-01"}, "end", "got '10000-01-01'"),
            ({"daily>": "01:00:00", "end": "2026-02-30"}, "end", "got '2026-02-30'"),
            ({"daily>": "01:00:00", "jitter": "2d"}, "jitter", "'jitter' must be at most 1d"),
            ({"daily>": "01:00:00", "jitter": "soon"}, "jitter", "expected a duration such as"),
            (
                {"daily>": "01:00:00", "catchup_window": "1x"},
                "catchup_window",
                "'catchup_window' expected a duration such as 30s, 10m or 1h30m, got '1x'",
            ),
            (
                {"daily>": "01:00:00", "catchup_window": "999999999d"},
                "catchup_window",
                "'catchup_window' must be at most 366d, got '999999999d'",
            ),
            (
                {"daily>": "01:00:00", "skip_delayed_by": -5},
                "skip_delayed_by",
                "'skip_delayed_by' must be at least 0s, got -5",
            ),
            (
                {"cron>": "@every 1h", "offset": "2h"},
                "offset",
                "'offset' must be at most 1h, got '2h'",
            ),
            (
                {"cron>": "0 * * * *", "offset": "5m"},
                "offset",
                "'offset' is only valid with cron>: \"@every ...\"",
            ),
            ({"cron>": "@every 0s"}, "cron>", "'cron>' @every period must be at least 1s"),
            ({"cron>": "@every"}, "cron>", "needs a period after @every"),
            ({"cron>": "@every soon"}, "cron>", "'cron>' @every period expected a duration"),
            (
                {"daily>": "01:00:00", "jiter": "5m"},
                "jiter",
                "unknown schedule option 'jiter' (did you mean 'jitter'?)",
            ),
            (
                {"daily>": "01:00:00", "catchup": "some"},
                "catchup",
                "'catchup' must be one of all | latest | none, got 'some'",
            ),
            (
                {"daily>": "01:00:00", "overlap": "queue"},
                "overlap",
                "'overlap' must be one of allow | skip | buffer_one, got 'queue'",
            ),
            (
                {"daily>": "01:00:00", "max_active": 0},
                "max_active",
                "'max_active' must be a whole number from 1 to 10000",
            ),
            ({"daily>": "01:00:00", "max_active": True}, "max_active", "whole number"),
            ({"daily>": "01:00:00", "max_catchup": -1}, "max_catchup", "from 0 to 1000000"),
            (
                {"daily>": "01:00:00", "skip_on_overtime": "yes"},
                "skip_on_overtime",
                "'skip_on_overtime' must be true or false",
            ),
        ],
    )
    def test_each_error_names_the_offending_key(
        self, raw: dict[str, Any], key: str, message: str
    ) -> None:
        error = rejected(raw)
        assert error.key == key
        assert message in error.message

    def test_an_unknown_time_zone_is_named_with_the_closest_one(self) -> None:
        error = rejected({"cron>": "0 * * * *"}, "Europe/Berln")
        assert (error.key, error.message) == (
            "timezone",
            "unknown timezone 'Europe/Berln' (did you mean 'Europe/Berlin'?)",
        )

    def test_the_last_friday_of_the_month_is_croniters_l5(self) -> None:
        spec = parse_schedule({"cron>": "0 9 * * L5"}, "UTC")
        assert spec.session_times(datetime(2026, 1, 1, tzinfo=UTC), 2) == [
            datetime(2026, 1, 30, 9, tzinfo=UTC),
            datetime(2026, 2, 27, 9, tzinfo=UTC),
        ]

    def test_skip_on_overtime_is_the_skip_overlap_policy(self) -> None:
        assert parse_schedule({"daily>": "01:00:00", "skip_on_overtime": True}, "UTC").overlap == (
            "skip"
        )
        assert parse_schedule({"daily>": "01:00:00", "skip_on_overtime": False}, "UTC").overlap == (
            "allow"
        )

    def test_skip_delayed_by_is_the_catchup_window(self) -> None:
        spec = parse_schedule({"daily>": "01:00:00", "skip_delayed_by": "1h"}, "UTC")
        assert spec.catchup_window_seconds == 3600

    @pytest.mark.parametrize("window", [None, "none", "unlimited", "None"])
    def test_a_catchup_window_of_none_means_no_age_limit(self, window: Any) -> None:
        spec = parse_schedule({"daily>": "01:00:00", "catchup_window": window}, "UTC")
        assert spec.catchup_window_seconds is None

    def test_the_default_policies_are_all_within_a_day_and_sixteen_active(self) -> None:
        spec = parse_schedule({"daily>": "01:00:00"}, "UTC")
        assert (spec.catchup, spec.catchup_window_seconds, spec.max_catchup) == ("all", 86400, None)
        assert (spec.overlap, spec.max_active, spec.jitter_seconds) == ("allow", 16, 0)

    def test_the_policies_and_interval_survive_the_stored_config(self) -> None:
        spec = parse_schedule(
            {
                "cron>": "@every 1h30m",
                "offset": "10m",
                "jitter": "30s",
                "catchup": "latest",
                "catchup_window": "none",
                "max_catchup": 3,
                "overlap": "buffer_one",
                "max_active": 2,
                "end": "2030-01-01",
            },
            "Europe/Berlin",
        )
        assert ScheduleSpec.from_config(spec.to_config()) == spec
        assert spec.to_config()["interval_seconds"] == 5400
        assert spec.to_config()["catchup_window_seconds"] is None


class TestEvery:
    def test_every_is_a_fixed_rate_in_seconds(self) -> None:
        spec = parse_schedule({"cron>": "@every 1h30m"}, "UTC")
        assert (spec.kind, spec.value, spec.cron, spec.interval_seconds) == (
            "cron",
            "@every 1h30m",
            "",
            5400,
        )
        assert spec.describe() == "cron>: @every 1h30m"

    @pytest.mark.parametrize("zone", ["UTC", "Asia/Kolkata", "America/New_York"])
    def test_every_is_aligned_to_the_unix_epoch_whatever_the_zone(self, zone: str) -> None:
        spec = parse_schedule({"cron>": "@every 1h30m"}, zone)
        times = spec.session_times(datetime(2026, 5, 4, 3, 2, 1, tzinfo=UTC), 50)
        assert all(t.timestamp() % 5400 == 0 for t in times)
        assert times[0] == datetime(2026, 5, 4, 4, 30, tzinfo=UTC)

    def test_the_offset_moves_every_tick_by_that_much(self) -> None:
        spec = parse_schedule({"cron>": "@every 1h", "offset": "15m"}, "UTC")
        assert spec.session_times(datetime(2026, 1, 1, 0, 15, tzinfo=UTC), 2) == [
            datetime(2026, 1, 1, 1, 15, tzinfo=UTC),
            datetime(2026, 1, 1, 2, 15, tzinfo=UTC),
        ]
        assert spec.last_session_time(datetime(2026, 1, 1, 0, 14, tzinfo=UTC)) == datetime(
            2025, 12, 31, 23, 15, tzinfo=UTC
        )

    def test_an_interval_counts_its_ticks_in_a_range(self) -> None:
        spec = parse_schedule({"cron>": "@every 10m"}, "UTC")
        first = datetime(2026, 1, 1, tzinfo=UTC)
        assert spec.count_between(first, first + timedelta(hours=1), 100) == 7


class TestStartAndEnd:
    def test_start_and_end_are_inclusive_dates_in_the_schedule_zone(self) -> None:
        # 2026-03-08 is New York's spring-forward day: 23 hours long.
        spec = parse_schedule(
            {"cron>": "0 * * * *", "start": "2026-03-08", "end": "2026-03-08"},
            "America/New_York",
        )
        times = spec.session_times(datetime(2026, 1, 1, tzinfo=UTC), 100)
        assert len(times) == 23
        assert spec.local(times[0]).isoformat() == "2026-03-08T00:00:00-05:00"
        assert spec.local(times[-1]).isoformat() == "2026-03-08T23:00:00-04:00"

    def test_nothing_comes_after_the_end(self) -> None:
        spec = parse_schedule({"daily>": "07:00:00", "end": "2026-03-31"}, "Asia/Tokyo")
        last = datetime(2026, 3, 30, 15, tzinfo=UTC)  # 2026-03-31T00:00+09:00
        assert spec.next_session_time(last - timedelta(seconds=1)) == last
        assert spec.next_session_time(last) is None
        assert spec.next_session_time(datetime(2027, 1, 1, tzinfo=UTC)) is None
        assert spec.last_session_time(datetime(2027, 1, 1, tzinfo=UTC)) == last

    def test_nothing_comes_before_the_start(self) -> None:
        spec = parse_schedule({"daily>": "07:00:00", "start": "2026-04-01"}, "Asia/Tokyo")
        first = datetime(2026, 3, 31, 15, tzinfo=UTC)  # 2026-04-01T00:00+09:00
        assert spec.last_session_time(first - timedelta(seconds=1)) is None
        assert spec.next_session_time(datetime(2020, 1, 1, tzinfo=UTC)) == first

    def test_a_start_day_whose_midnight_is_skipped_starts_after_the_gap(self) -> None:
        # Santiago springs forward at midnight: 2026-09-06 begins at 01:00.
        spec = parse_schedule({"cron>": "@daily", "start": "2026-09-06"}, "America/Santiago")
        first = spec.next_session_time(datetime(2026, 1, 1, tzinfo=UTC))
        assert first is not None
        assert spec.local(first).isoformat() == "2026-09-06T01:00:00-03:00"

    @pytest.mark.parametrize(
        "zone", ["UTC", "Asia/Tokyo", "America/New_York", "Pacific/Kiritimati"]
    )
    @pytest.mark.parametrize("expression", ["0 23 * * *", "*/5 * * * *", "@every 1h"])
    def test_the_far_future_has_no_next_session_and_does_not_crash(
        self, zone: str, expression: str
    ) -> None:
        spec = parse_schedule({"cron>": expression}, zone)
        assert spec.next_session_time(datetime.max.replace(tzinfo=UTC)) is None
        last = spec.last_session_time(datetime.max.replace(tzinfo=UTC))
        assert last is not None and last.year == 9999

    @pytest.mark.parametrize("day", ["0001-01-01", "9999-12-30"])
    def test_the_first_and_last_representable_days_are_accepted(self, day: str) -> None:
        for zone in ("UTC", "Asia/Tokyo", "America/New_York"):
            spec = parse_schedule({"cron>": "@daily", "start": day}, zone)
            assert spec.next_session_time(datetime(1, 1, 1, tzinfo=UTC)) is not None

    def test_a_start_whose_first_time_is_past_the_last_accepted_instant_never_fires(
        self,
    ) -> None:
        # 9999-12-31T00:00Z lies past 9999-12-30T23:59:59.999999Z; in Tokyo it does not.
        assert "never fires" in str(rejected({"cron>": "@daily", "start": "9999-12-31"}))
        parse_schedule({"cron>": "@daily", "start": "9999-12-31"}, "Asia/Tokyo")

    def test_a_cron_counts_its_times_up_to_a_cap(self) -> None:
        spec = parse_schedule({"cron>": "*/15 * * * *"}, "UTC")
        first = datetime(2026, 1, 1, tzinfo=UTC)
        assert spec.count_between(first, first + timedelta(hours=1), 5) == 5
        assert spec.count_between(first, first + timedelta(hours=1), 4) is None


class TestJitter:
    SPEC = parse_schedule({"cron>": "*/5 * * * *", "delay": 60, "jitter": "10m"}, "UTC")
    TIMES = SPEC.session_times(datetime(2026, 1, 1, tzinfo=UTC), 300)

    def test_every_replica_computes_the_same_run_time(self) -> None:
        replica = parse_schedule({"cron>": "*/5 * * * *", "delay": 60, "jitter": "10m"}, "UTC")
        for session_time in self.TIMES[:50]:
            run = self.SPEC.run_time(session_time, "project/42")
            assert replica.run_time(session_time, "project/42") == run
            assert self.SPEC.run_time(session_time, "project/42") == run

    def test_the_run_time_is_the_delay_plus_at_most_the_jitter(self) -> None:
        offsets = {self.SPEC.run_time(t, "seed") - t for t in self.TIMES}
        assert min(offsets) >= timedelta(seconds=60)
        assert max(offsets) <= timedelta(seconds=60 + 600)
        assert len(offsets) > 100  # spread over the window, not one fixed shift

    def test_different_schedules_spread_the_same_session_time(self) -> None:
        session_time = self.TIMES[0]
        runs = {self.SPEC.run_time(session_time, f"schedule-{n}") for n in range(20)}
        assert len(runs) > 10

    def test_without_jitter_the_run_time_is_session_time_plus_delay(self) -> None:
        spec = parse_schedule({"daily>": "07:00:00"}, "America/New_York")
        session_time = datetime(2026, 3, 8, 5, tzinfo=UTC)  # midnight, the spring-forward day
        assert spec.run_time(session_time, "any") == session_time + timedelta(hours=7)


class TestTheEndOfTheAcceptedRange:
    """The series of session times ends at the last accepted instant (9999-12-30T23:59:59Z),
    so no time the server computes falls outside what a request may give."""

    @pytest.mark.parametrize(
        "zone", ["UTC", "Asia/Tokyo", "America/New_York", "Pacific/Kiritimati"]
    )
    @pytest.mark.parametrize(
        "raw",
        [
            {"cron>": "* * * * *"},
            {"cron>": "0 11 * * *"},
            {"daily>": "07:00:00"},
            {"cron>": "@every 7m"},
            {"minutes_interval>": "30"},
        ],
    )
    def test_no_session_time_lies_past_the_last_accepted_instant(
        self, zone: str, raw: dict[str, Any]
    ) -> None:
        spec = parse_schedule(raw, zone)
        times = spec.session_times(LATEST - timedelta(days=2), 10_000)
        assert times and times[-1] <= LATEST
        assert spec.next_session_time(times[-1]) is None
        assert spec.last_session_time(datetime.max.replace(tzinfo=UTC)) == times[-1]

    def test_a_minutely_schedule_ends_at_the_last_minute_of_9999_12_30(self) -> None:
        spec = parse_schedule({"cron>": "* * * * *"}, "UTC")
        start = datetime(9999, 12, 30, 23, 50, tzinfo=UTC)
        times = spec.session_times(start - timedelta(microseconds=1), 10_000)
        assert len(times) == 10
        assert times[-1] == datetime(9999, 12, 30, 23, 59, tzinfo=UTC)

    def test_a_run_time_past_the_range_is_the_last_accepted_instant(self) -> None:
        spec = parse_schedule({"cron>": "0 23 * * *", "delay": "366d", "jitter": "1d"}, "UTC")
        session_time = datetime(9999, 12, 30, 23, tzinfo=UTC)
        assert spec.run_time(session_time, "seed") == LATEST
        assert spec.delayed(session_time) == LATEST
        early = datetime(2026, 1, 1, 23, tzinfo=UTC)
        assert spec.delayed(early) == early + timedelta(days=366)

    def test_an_interval_counts_no_tick_past_the_range(self) -> None:
        spec = parse_schedule({"cron>": "@every 1h"}, "UTC")
        first = datetime(9999, 12, 30, 20, tzinfo=UTC)
        assert spec.count_between(first, datetime.max.replace(tzinfo=UTC), 100) == 4
