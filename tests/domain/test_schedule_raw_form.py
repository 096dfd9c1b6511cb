"""Specification of a schedule spec's raw form: the ``schedule:`` mapping it parses back from."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tickwork.shared.domain.schedule import OPTIONS, ScheduleSpec, parse_schedule
from tickwork.shared.domain.schedule_policies import Catchup, Overlap

FORMS = st.sampled_from(
    [
        {"cron>": "*/15 9-17 * * 1-5"},
        {"cron>": "@daily"},
        {"cron>": "@every 1h30m"},
        {"daily>": "07:00:00"},
        {"hourly>": "30:00"},
        {"weekly>": "Mon,09:30:00"},
        {"monthly>": "1,04:00:00"},
        {"minutes_interval>": 15},
    ]
)


@st.composite
def schedules(draw: st.DrawFn) -> dict[str, Any]:
    """A valid ``schedule:`` mapping with any subset of the options its form takes."""
    raw = dict(draw(FORMS))
    form = next(iter(raw))
    every = str(raw[form]).startswith("@every")
    options: dict[str, st.SearchStrategy[Any]] = {
        "start": st.sampled_from(["2026-01-01", "2026-03-15"]),
        "end": st.sampled_from(["2027-01-01", "2030-12-31"]),
        "jitter": st.integers(0, 86400),
        "catchup": st.sampled_from([policy.value for policy in Catchup]),
        "catchup_window": st.one_of(st.just("none"), st.integers(0, 86400 * 30)),
        "max_catchup": st.integers(0, 1000),
        "overlap": st.sampled_from([policy.value for policy in Overlap]),
        "max_active": st.integers(1, 10_000),
        "skip_delayed_by": st.sampled_from(["1h", "none", 600]),
        "skip_on_overtime": st.booleans(),
    }
    if form in ("cron>", "minutes_interval>"):
        options["delay"] = st.integers(0, 86400)
    if every:
        options["offset"] = st.integers(0, 5400)
    chosen = draw(st.sets(st.sampled_from(sorted(options))))
    raw.update({key: draw(options[key]) for key in chosen})
    return raw


class TestRawForm:
    @settings(max_examples=200, deadline=None)
    @given(schedules(), st.sampled_from(["UTC", "Asia/Tokyo", "America/Los_Angeles"]))
    def test_parsing_a_specs_raw_form_gives_the_spec_back(
        self, raw: dict[str, Any], timezone: str
    ) -> None:
        spec = parse_schedule(raw, timezone)

        assert parse_schedule(spec.raw(), timezone) == spec

    def test_every_field_of_a_spec_has_its_option_in_the_raw_form(self) -> None:
        # Given a spec where every field is away from its default
        spec = parse_schedule(
            {
                "cron>": "@every 1h",
                "offset": 600,
                "start": "2026-01-01",
                "end": "2027-01-01",
                "jitter": 30,
                "catchup": "latest",
                "catchup_window": "none",
                "max_catchup": 5,
                "overlap": "buffer_one",
                "max_active": 2,
            },
            "UTC",
        )
        defaults = ScheduleSpec("cron", "@every 1h", "UTC", "", interval_seconds=3600)

        # Then each field that differs from the default spec is carried by the raw form
        differing = {
            f.name for f in fields(spec) if getattr(spec, f.name) != getattr(defaults, f.name)
        }
        assert differing == {
            "offset_seconds",
            "start",
            "end",
            "jitter_seconds",
            "catchup",
            "catchup_window_seconds",
            "max_catchup",
            "overlap",
            "max_active",
        }
        assert set(spec.raw()) - {"cron>"} <= set(OPTIONS)
        assert parse_schedule(spec.raw(), "UTC") == spec

    def test_the_raw_form_parsed_in_another_zone_keeps_every_option(self) -> None:
        spec = parse_schedule({"daily>": "07:00:00", "jitter": "10m", "overlap": "skip"}, "UTC")

        moved = parse_schedule(spec.raw(), "Asia/Tokyo")

        assert (moved.timezone, moved.jitter_seconds, moved.overlap) == (
            "Asia/Tokyo",
            600,
            Overlap.SKIP,
        )
