"""Specification of durations as users write them: whole seconds or ``1d2h3m4s`` text."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tickwork.shared.domain.durations import BadDuration, format_duration, parse_duration


class TestParseDuration:
    @pytest.mark.parametrize(
        ("value", "seconds"),
        [
            (0, 0),
            (90, 90),
            ("90", 90),
            ("30s", 30),
            ("10m", 600),
            ("1h30m", 5400),
            ("2d", 172_800),
            ("1d2h3m4s", 93_784),
            (" 1h 30m ", 5400),
            ("1H30M", 5400),
            ("90m", 5400),
        ],
    )
    def test_an_integer_or_unit_text_is_whole_seconds(self, value: object, seconds: int) -> None:
        assert parse_duration(value) == seconds

    @pytest.mark.parametrize(
        "value",
        ["", "abc", "1.5h", "30s10m", "1h1h", "-1", "1w", "h", True, 1.5, None, ["1h"]],
    )
    def test_anything_else_is_refused_with_an_example(self, value: object) -> None:
        with pytest.raises(BadDuration, match=re.escape("expected a duration such as 30s")):
            parse_duration(value)

    def test_a_negative_number_of_seconds_is_below_the_minimum(self) -> None:
        with pytest.raises(BadDuration, match=re.escape("must be at least 0s, got -1")):
            parse_duration(-1)

    def test_the_minimum_and_maximum_are_inclusive(self) -> None:
        assert parse_duration("1s", minimum=1) == 1
        assert parse_duration("1h", maximum=3600) == 3600
        with pytest.raises(BadDuration, match=re.escape("must be at least 1s, got '0s'")):
            parse_duration("0s", minimum=1)
        with pytest.raises(BadDuration, match=re.escape("must be at most 1h, got '1h1s'")):
            parse_duration("1h1s", maximum=3600)


class TestFormatDuration:
    @pytest.mark.parametrize(
        ("seconds", "text"),
        [(0, "0s"), (59, "59s"), (60, "1m"), (3661, "1h1m1s"), (86_400, "1d"), (90_000, "1d1h")],
    )
    def test_the_shortest_unit_spelling(self, seconds: int, text: str) -> None:
        assert format_duration(seconds) == text

    @settings(max_examples=200, deadline=None)
    @given(st.integers(min_value=0, max_value=10**9))
    def test_formatting_then_parsing_gives_the_same_seconds(self, seconds: int) -> None:
        assert parse_duration(format_duration(seconds)) == seconds
