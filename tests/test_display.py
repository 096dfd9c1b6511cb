"""The formatters people read: times for people and for JSON, durations, sizes, running
time, and the state colour table with the stylesheet made from it."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from tickwork.shared.display import (
    duration_text,
    elapsed_seconds,
    iso_time,
    running_for_text,
    size_text,
    time_text,
)
from tickwork.shared.state_colours import STATE_COLOURS, STATE_ENUMS, colour_of, states_stylesheet

TOKYO = ZoneInfo("Asia/Tokyo")
NOON = datetime(2026, 12, 2, 12, 0, 0, 123456, tzinfo=UTC)


class TestTimes:
    def test_a_time_for_people_is_to_the_second_with_z_for_utc(self) -> None:
        assert time_text(NOON) == "2026-12-02T12:00:00Z"

    def test_a_time_for_people_is_in_the_zone_given_with_its_offset(self) -> None:
        assert time_text(NOON, "Asia/Tokyo", sep=" ") == "2026-12-02 21:00:00+09:00"

    def test_an_unknown_zone_shows_the_time_in_its_own_offset(self) -> None:
        assert time_text(NOON, "Nowhere/Land") == "2026-12-02T12:00:00Z"

    def test_a_time_for_json_keeps_its_precision_and_offset(self) -> None:
        assert iso_time(NOON, "Asia/Tokyo") == "2026-12-02T21:00:00.123456+09:00"
        assert iso_time(NOON) == "2026-12-02T12:00:00.123456+00:00"
        assert iso_time(None) is None


class TestDurations:
    @pytest.mark.parametrize(
        ("seconds", "shown"),
        [
            (None, "-"),
            (0.25, "0.2s"),
            (12.4, "12.4s"),
            (59.97, "1m 00s"),
            (185, "3m 05s"),
            (7390, "2h 03m"),
            (-3, "0.0s"),
        ],
    )
    def test_a_duration_reads_in_seconds_minutes_or_hours(
        self, seconds: float | None, shown: str
    ) -> None:
        assert duration_text(seconds) == shown

    def test_elapsed_time_needs_both_ends_and_is_never_negative(self) -> None:
        assert elapsed_seconds(NOON, NOON + timedelta(seconds=90)) == 90.0
        assert elapsed_seconds(NOON, NOON - timedelta(seconds=5)) == 0.0
        assert elapsed_seconds(None, NOON) is None

    def test_running_for_is_the_time_since_the_start(self) -> None:
        now = NOON + timedelta(minutes=3, seconds=4)
        assert running_for_text(NOON, now) == "3m 04s"
        assert running_for_text(NOON.astimezone(TOKYO).isoformat(), now) == "3m 04s"
        assert running_for_text(184, now) == "3m 04s"
        assert running_for_text(None, now) == "-"


@pytest.mark.parametrize(
    ("size", "shown"),
    [(None, "-"), (0, "0 B"), (512, "512 B"), (1536, "1.5 KiB"), (64 * 2**20, "64.0 MiB")],
)
def test_a_size_reads_in_binary_units(size: int | None, shown: str) -> None:
    assert size_text(size) == shown


class TestStateColours:
    def test_every_state_of_every_state_enum_has_a_colour_in_both_schemes(self) -> None:
        for enum in STATE_ENUMS:
            for state in enum:
                colour = STATE_COLOURS.get(state.value)
                assert colour is not None, f"{enum.__name__}.{state.name} has no colour"
                assert re.fullmatch(r"#[0-9a-f]{6}", colour.light), state
                assert re.fullmatch(r"#[0-9a-f]{6}", colour.dark), state

    def test_the_stylesheet_defines_a_property_and_a_badge_for_each_state(self) -> None:
        css = states_stylesheet()
        light, dark = css.split("@media (prefers-color-scheme: dark)")
        for name, colour in STATE_COLOURS.items():
            assert f"--state-{name}: {colour.light};" in light
            assert f"--state-{name}: {colour.dark};" in dark
            assert f".state-{name} {{ color: var(--state-{name}); }}" in css

    def test_a_state_the_table_does_not_know_is_muted(self) -> None:
        assert colour_of("from-a-newer-release").kind == "muted"
