"""Specification of numbers written as numbers or as strings (``3`` and ``"3"`` alike)."""

from __future__ import annotations

from typing import Any

import pytest

from tickwork.shared.domain.numbers import decimal_number, whole_number


@pytest.mark.parametrize(
    ("value", "number"), [(3, 3), ("3", 3), (" 12 ", 12), ("-2", -2), ("+4", 4), (5.0, 5)]
)
def test_a_whole_number_may_be_written_as_a_number_or_a_string(value: Any, number: int) -> None:
    assert whole_number(value) == number


@pytest.mark.parametrize("value", ["3x", "", "1.5", 1.5, True, False, None, [3], "0x10", "1e3"])
def test_anything_else_is_not_a_whole_number(value: Any) -> None:
    assert whole_number(value) is None


@pytest.mark.parametrize(
    ("value", "number"), [(2, 2.0), (0.5, 0.5), ("0.5", 0.5), ("10", 10.0), (" .25 ", 0.25)]
)
def test_a_decimal_may_be_written_as_a_number_or_a_string(value: Any, number: float) -> None:
    assert decimal_number(value) == number


@pytest.mark.parametrize("value", ["10s", "nan", "inf", float("inf"), True, None, "1.2.3"])
def test_text_units_infinity_and_booleans_are_not_decimals(value: Any) -> None:
    assert decimal_number(value) is None
