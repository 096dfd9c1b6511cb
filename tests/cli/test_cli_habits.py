"""What the client commands decide without a server: ``--session`` keywords, how a time
is shown, the closest name to a typo, ids checked before the API is asked, and API
problems reported under the flag the user typed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import click
import pytest
from click.testing import CliRunner

from tickwork.services.cli.client import RecordId, flag_problems
from tickwork.services.cli.errors import did_you_mean
from tickwork.services.cli.output import format_time, text
from tickwork.services.cli.params import session_time_of
from tickwork.shared.domain.schedule import resolve_timezone, written_timezone
from tickwork.shared.errors import Problem

NOW = datetime(2026, 12, 2, 5, 49, 6, 708626, tzinfo=UTC)  # 14:49:06 in Tokyo
TOKYO = timezone(timedelta(hours=9))


class TestSessionKeywords:
    def test_now_is_the_current_time_to_the_second_in_the_workflows_zone(self) -> None:
        found = session_time_of("now", NOW, "Asia/Tokyo")
        assert found.isoformat() == "2026-12-02T14:49:06+09:00"

    def test_hourly_is_the_current_hour_in_the_workflows_zone(self) -> None:
        assert session_time_of("hourly", NOW, "Asia/Tokyo") == datetime(
            2026, 12, 2, 14, 0, tzinfo=TOKYO
        )

    def test_daily_is_today_in_the_workflows_zone_not_in_utc(self) -> None:
        # 05:49 UTC on the 2nd is already the 2nd in Tokyo, but still the 1st in Honolulu.
        assert session_time_of("daily", NOW, "Asia/Tokyo") == datetime(2026, 12, 2, tzinfo=TOKYO)
        honolulu = session_time_of("daily", NOW, "Pacific/Honolulu")
        assert honolulu.isoformat() == "2026-12-01T00:00:00-10:00"

    def test_last_is_the_workflows_latest_session(self) -> None:
        last = datetime(2026, 11, 30, 7, tzinfo=TOKYO)
        assert session_time_of("last", NOW, "Asia/Tokyo", last) == last

    def test_last_without_any_session_is_a_usage_error_naming_the_flag(self) -> None:
        with pytest.raises(click.BadParameter) as raised:
            session_time_of("last", NOW, "UTC", None)
        assert raised.value.param_hint == "'--session'"

    @pytest.mark.parametrize(
        ("raw", "expected"),
        [
            ("2026-01-30", "2026-01-30T00:00:00+09:00"),
            ("2026-01-30 07:00:00", "2026-01-30T07:00:00+09:00"),
            ("2026-01-30T07:00:00Z", "2026-01-30T07:00:00+00:00"),
        ],
    )
    def test_a_date_or_time_is_read_in_the_workflows_zone_unless_it_has_an_offset(
        self, raw: str, expected: str
    ) -> None:
        assert session_time_of(raw, NOW, "Asia/Tokyo").isoformat() == expected

    def test_anything_else_is_a_usage_error_naming_the_flag(self) -> None:
        with pytest.raises(click.BadParameter) as raised:
            session_time_of("yesterday", NOW, "UTC")
        assert raised.value.param_hint == "'--session'"


class TestFormatTime:
    def test_a_utc_time_is_shown_to_the_second_with_z(self) -> None:
        assert format_time(NOW) == "2026-12-02T05:49:06Z"
        assert format_time("2026-12-02T05:49:06.708626+00:00") == "2026-12-02T05:49:06Z"

    def test_a_time_with_an_offset_keeps_it(self) -> None:
        assert format_time("2026-12-02T09:00:00.5+09:00") == "2026-12-02T09:00:00+09:00"
        assert format_time(NOW.astimezone(TOKYO)) == "2026-12-02T14:49:06+09:00"

    @pytest.mark.parametrize("value", ["2026-12-02", "daily>: 07:00:00", "12", "2026-99-99T00:00"])
    def test_a_string_that_is_not_a_time_is_shown_as_it_is(self, value: str) -> None:
        assert format_time(value) == value

    def test_table_cells_show_times_by_the_same_rule(self) -> None:
        assert text("2026-12-02T05:49:06.708626Z") == "2026-12-02T05:49:06Z"
        assert text(NOW) == "2026-12-02T05:49:06Z"
        assert text(None) == "-"


class TestDidYouMean:
    def test_the_closest_name_is_suggested(self) -> None:
        assert did_you_mean("exampels", ["demo", "examples"]) == " (did you mean 'examples'?)"

    def test_nothing_is_suggested_when_no_name_is_close(self) -> None:
        assert did_you_mean("zzz", ["demo", "examples"]) == ""


class TestRecordId:
    @pytest.mark.parametrize("raw", ["abc", "0", "-1", "1.5", "", "١٢"])
    def test_anything_but_a_positive_whole_number_is_refused_naming_the_argument(
        self, raw: str
    ) -> None:
        @click.command()
        @click.argument("attempt_id", type=RecordId("attempt"), metavar="ID")
        def show(attempt_id: str) -> None:
            """Show an attempt."""

        result = CliRunner().invoke(show, ["--", raw])
        assert result.exit_code == 2, result.output
        assert (
            f"Invalid value for 'ID': {raw!r} is not an attempt id (a positive whole number)"
            in (result.output)
        )

    def test_an_id_is_passed_on_as_its_digits_or_its_number(self) -> None:
        assert RecordId("attempt").convert(" 042", None, None) == "42"
        assert RecordId("attempt", int).convert("42", None, None) == 42


class TestProblemsUnderFlags:
    def test_an_api_pointer_is_named_by_the_flag_that_gave_it(self) -> None:
        problems = [Problem("/session_time", None, "expected an ISO 8601 time")]
        assert [str(p) for p in flag_problems(problems)] == ["--session: expected an ISO 8601 time"]

    def test_a_pointer_inside_a_field_is_named_by_the_fields_flag(self) -> None:
        problems = [Problem("/params/a", None, "too long")]
        assert str(flag_problems(problems)[0]) == "--param: too long"

    def test_validation_wording_of_the_api_is_made_plain(self) -> None:
        problems = [
            Problem("/count", None, "Input should be a valid integer"),
            Problem("/idempotency_key", None, "String should have at most 255 characters"),
        ]
        assert [str(p) for p in flag_problems(problems)] == [
            "--count: expected a whole number",
            "--idempotency-key: expected at most 255 characters",
        ]


class TestWrittenTimezone:
    @pytest.mark.parametrize("written", ["+09:00", "-05:00", "+14:00"])
    def test_an_offset_zone_is_shown_as_written(self, written: str) -> None:
        assert written_timezone(resolve_timezone(written)) == written

    @pytest.mark.parametrize("name", ["Asia/Tokyo", "UTC", "Etc/UTC"])
    def test_a_named_zone_is_shown_as_it_is(self, name: str) -> None:
        assert written_timezone(name) == name
