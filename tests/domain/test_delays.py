"""Specifications of Helix-style delays: what ``_start_at`` means and which time wins."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from tickwork.shared.domain.delays import BadStartAt, StartRule, parse_start_at, start_instant

NEW_YORK = ZoneInfo("America/New_York")
TOKYO = ZoneInfo("Asia/Tokyo")


class TestParseStartAt:
    @pytest.mark.parametrize(
        ("value", "stored"),
        [
            ("07:00", "07:00:00"),
            ("7:05", "07:05:00"),
            ("23:59:59", "23:59:59"),
            ("2026-12-01T07:00:00+09:00", "2026-12-01T07:00:00+09:00"),
            ("2026-12-01T07:00:00Z", "2026-12-01T07:00:00+00:00"),
            ("2026-12-01 07:00+09:00", "2026-12-01T07:00:00+09:00"),
        ],
    )
    def test_a_wall_time_or_an_instant_with_an_offset_is_kept_in_one_form(
        self, value: str, stored: str
    ) -> None:
        assert parse_start_at(value) == stored

    @pytest.mark.parametrize(
        ("value", "message"),
        [
            ("24:00", "has an out-of-range time of day '24:00'"),
            ("12:60", "has an out-of-range time of day '12:60'"),
            ("2026-12-01T07:00:00", "needs a UTC offset such as +09:00 or Z"),
            ("2026-12-01", "needs a UTC offset"),
            ("tomorrow", "must be a time of day HH:MM[:SS] or a date and time with a UTC offset"),
            (700, "got 700"),
        ],
    )
    def test_anything_else_is_refused_saying_what_was_expected(
        self, value: object, message: str
    ) -> None:
        with pytest.raises(BadStartAt, match=re.escape(message)):
            parse_start_at(value)


class TestStartInstant:
    def test_a_wall_time_is_taken_on_the_sessions_date_in_the_workflow_zone(self) -> None:
        # The session 2024-05-01T00:00Z is 09:00 on May 1st in Tokyo
        session = datetime(2024, 5, 1, 0, 0, tzinfo=UTC)

        assert start_instant("20:00:00", session, TOKYO) == datetime(2024, 5, 1, 11, tzinfo=UTC)

    def test_a_wall_time_before_the_session_time_stays_on_the_sessions_date(self) -> None:
        session = datetime(2024, 5, 1, 0, 0, tzinfo=UTC)  # 09:00 in Tokyo

        assert start_instant("08:00:00", session, TOKYO) == datetime(2024, 4, 30, 23, tzinfo=UTC)

    def test_the_date_is_the_sessions_local_date_not_its_utc_date(self) -> None:
        # 02:00Z on March 8th is still March 7th in New York
        session = datetime(2026, 3, 8, 2, 0, tzinfo=UTC)

        instant = start_instant("23:00:00", session, NEW_YORK)

        assert instant == datetime(2026, 3, 8, 4, 0, tzinfo=UTC)  # 23:00 EST on March 7th

    def test_a_wall_time_in_the_spring_forward_gap_means_the_end_of_the_gap(self) -> None:
        # 02:30 does not exist on 2026-03-08 in New York: clocks go from 02:00 to 03:00 EDT
        session = datetime(2026, 3, 8, 12, 0, tzinfo=UTC)

        instant = start_instant("02:30:00", session, NEW_YORK)

        assert instant == datetime(2026, 3, 8, 7, 0, tzinfo=UTC)
        assert instant.astimezone(NEW_YORK).strftime("%H:%M") == "03:00"

    def test_a_wall_time_in_the_repeated_hour_means_its_first_pass(self) -> None:
        session = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)

        instant = start_instant("01:30:00", session, NEW_YORK)

        assert instant == datetime(2026, 11, 1, 5, 30, tzinfo=UTC)  # 01:30 EDT, not EST

    def test_an_instant_means_itself_whatever_the_session(self) -> None:
        session = datetime(2024, 5, 1, tzinfo=UTC)
        instant = start_instant("2026-12-01T07:00:00+09:00", session, NEW_YORK)

        assert instant == datetime(2026, 11, 30, 22, 0, tzinfo=UTC)


class TestNotBefore:
    READY = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)
    SESSION = datetime(2024, 5, 1, 0, 0, tzinfo=UTC)

    def test_a_delay_counts_from_the_time_the_task_became_ready(self) -> None:
        rule = StartRule(delay_seconds=90)

        assert rule.not_before(self.READY, self.SESSION, "UTC") == self.READY + timedelta(
            seconds=90
        )

    @pytest.mark.parametrize(
        ("delay_seconds", "start_at", "expected"),
        [
            (3600, "09:30:00", datetime(2024, 5, 1, 10, 0, tzinfo=UTC)),  # the delay is later
            (600, "09:30:00", datetime(2024, 5, 1, 9, 30, tzinfo=UTC)),  # the start is later
            (0, "06:00:00", datetime(2024, 5, 1, 9, 0, tzinfo=UTC)),  # a past start: now
        ],
    )
    def test_the_later_of_delay_and_start_time_wins(
        self, delay_seconds: int, start_at: str, expected: datetime
    ) -> None:
        rule = StartRule(delay_seconds, start_at)

        assert rule.not_before(self.READY, self.SESSION, "UTC") == expected

    def test_the_rule_round_trips_through_its_json_form(self) -> None:
        for rule in (StartRule(30), StartRule(0, "07:00:00"), StartRule(5, "07:00:00")):
            assert StartRule.from_config(rule.to_config()) == rule
