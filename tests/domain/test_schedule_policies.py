"""Schedule policies are closed sets: read as enums, an unknown value refused by name."""

from __future__ import annotations

import json

import pytest

from tickwork.shared.domain.choices import parse_choice
from tickwork.shared.domain.schedule import ScheduleSpec, parse_schedule
from tickwork.shared.domain.schedule_policies import Catchup, MissedReason, Overlap
from tickwork.shared.errors import InvalidSchedule, UnknownValue


class TestPolicies:
    def test_parsed_policies_are_enums(self) -> None:
        spec = parse_schedule({"daily>": "07:00:00", "overlap": "skip", "catchup": "none"}, "UTC")
        assert spec.overlap is Overlap.SKIP
        assert spec.catchup is Catchup.NONE

    def test_skip_on_overtime_is_the_skip_policy(self) -> None:
        spec = parse_schedule({"daily>": "07:00:00", "skip_on_overtime": True}, "UTC")
        assert spec.overlap is Overlap.SKIP

    def test_the_stored_form_holds_the_same_strings_as_before(self) -> None:
        spec = parse_schedule({"daily>": "07:00:00", "overlap": "buffer_one"}, "UTC")
        config = spec.to_config()
        assert json.loads(json.dumps(config))["overlap"] == "buffer_one"
        assert "catchup" not in config  # the default is left out, as before

    def test_a_stored_config_reads_back_as_enums(self) -> None:
        spec = parse_schedule({"daily>": "07:00:00", "overlap": "skip"}, "UTC")
        again = ScheduleSpec.from_config(json.loads(json.dumps(spec.to_config())))
        assert again == spec
        assert again.overlap is Overlap.SKIP

    def test_an_unknown_overlap_in_a_stored_config_is_refused_by_name(self) -> None:
        config = {**parse_schedule({"daily>": "07:00:00"}, "UTC").to_config(), "overlap": "x"}
        with pytest.raises(InvalidSchedule) as caught:
            ScheduleSpec.from_config(config)
        assert caught.value.key == "overlap"
        assert caught.value.message == (
            "'overlap' must be one of allow | skip | buffer_one, got 'x'"
        )

    def test_an_unknown_catchup_in_a_stored_config_is_refused_by_name(self) -> None:
        config = {**parse_schedule({"daily>": "07:00:00"}, "UTC").to_config(), "catchup": 3}
        with pytest.raises(InvalidSchedule, match="'catchup' must be one of all"):
            ScheduleSpec.from_config(config)

    def test_an_unknown_overlap_in_a_workflow_is_refused(self) -> None:
        with pytest.raises(InvalidSchedule, match="'overlap' must be one of"):
            parse_schedule({"daily>": "07:00:00", "overlap": "queue"}, "UTC")


class TestParseChoice:
    def test_a_known_value_is_its_member(self) -> None:
        assert parse_choice(MissedReason, "edited", "reason") is MissedReason.EDITED

    @pytest.mark.parametrize("value", ["lost", None, 1, ["catchup"]])
    def test_an_unknown_value_names_where_it_was_read(self, value: object) -> None:
        with pytest.raises(UnknownValue) as caught:
            parse_choice(MissedReason, value, "schedule_missed.reason")
        assert str(caught.value) == (
            "schedule_missed.reason must be one of catchup | overlap | skipped | edited, "
            f"got {value!r}"
        )
