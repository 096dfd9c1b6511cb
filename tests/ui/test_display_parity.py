"""The pages' scripts show durations, sizes and times as the server does: static/display.js
gives the answers of shared/display.py for the same values, in a real Chromium."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tests.e2e._standalone import StandaloneProcess
from tickwork.shared.display import duration_text, size_text, time_text

DURATIONS = [
    0.0,
    0.04,
    0.4,
    12.34,
    59.94,
    59.96,
    60.0,
    61.2,
    184.4,
    599.7,
    3599.4,
    3599.6,
    3600.0,
    7505.0,
    86400.0 * 3 + 17.0,
    -2.0,
]
SIZES = [
    0,
    1,
    512,
    1023,
    1024,
    1536,
    65536,
    100_000,
    1024**2 - 1,
    64 * 1024**2,
    5 * 1024**3,
    3 * 1024**5,
]
INSTANTS = [
    datetime(2026, 12, 2, 0, 0, 0, tzinfo=UTC),
    datetime(2026, 3, 29, 1, 30, 15, 800_000, tzinfo=UTC),
    datetime(2026, 10, 25, 0, 59, 59, tzinfo=UTC),
    datetime(1999, 12, 31, 23, 59, 59, tzinfo=UTC),
]
ZONES = ["UTC", "Asia/Tokyo", "Europe/London", "America/St_Johns", "Asia/Kolkata"]


@pytest.fixture
def display(page: Any, open_ui_server: StandaloneProcess) -> Any:
    """A page of the UI with static/display.js loaded."""
    page.goto(open_ui_server.endpoint + "/ui/")
    page.wait_for_function("() => window.TickworkDisplay !== undefined")
    return page


def test_a_duration_reads_the_same_in_the_script_and_on_the_server(display: Any) -> None:
    shown = display.evaluate("(values) => values.map(window.TickworkDisplay.duration)", DURATIONS)
    assert shown == [duration_text(value) for value in DURATIONS]
    assert display.evaluate("window.TickworkDisplay.duration(null)") == duration_text(None)


def test_a_size_reads_the_same_in_the_script_and_on_the_server(display: Any) -> None:
    shown = display.evaluate("(values) => values.map(window.TickworkDisplay.size)", SIZES)
    assert shown == [size_text(value) for value in SIZES]


def test_a_time_in_a_zone_reads_the_same_in_the_script_and_on_the_server(display: Any) -> None:
    cases = [(instant, zone) for instant in INSTANTS for zone in ZONES]
    shown = display.evaluate(
        "(cases) => cases.map(([ms, zone]) => window.TickworkDisplay.time(new Date(ms), zone))",
        [[instant.timestamp() * 1000, zone] for instant, zone in cases],
    )
    assert shown == [time_text(instant, zone, sep=" ") for instant, zone in cases]
