"""The UI's Jinja filters: a time as a <time> element with its UTC instant and zone, plain
time text, and a state as a badge whose class names the state."""

from __future__ import annotations

from datetime import UTC, datetime

from tickwork.services.api.ui.formatting import state_badge, when, when_text

NOON = datetime(2026, 12, 2, 12, 0, 0, 500000, tzinfo=UTC)


def test_a_time_in_a_zone_carries_its_utc_instant_and_the_zone() -> None:
    assert str(when(NOON, "Asia/Tokyo")) == (
        '<time datetime="2026-12-02T12:00:00Z" title="2026-12-02T12:00:00Z" '
        'data-zone="Asia/Tokyo">2026-12-02 21:00:00+09:00</time>'
    )


def test_a_time_without_a_zone_has_no_data_zone_and_shows_utc_with_z() -> None:
    assert str(when(NOON.isoformat())) == (
        '<time datetime="2026-12-02T12:00:00Z" title="2026-12-02T12:00:00Z">'
        "2026-12-02 12:00:00Z</time>"
    )


def test_nothing_is_a_dash() -> None:
    assert (str(when(None)), when_text(""), str(state_badge(None))[-9:]) == (
        "-",
        "-",
        ">-</span>",
    )


def test_a_zone_name_is_escaped_in_its_attribute() -> None:
    assert 'data-zone="&lt;x&gt;"' in str(when(NOON, "<x>"))


def test_a_state_badge_takes_the_class_of_its_state() -> None:
    assert str(state_badge("retry_waiting")) == (
        '<span class="state state-retry_waiting">retry_waiting</span>'
    )
    assert "state-&lt;b&gt;" in str(state_badge("<b>"))
