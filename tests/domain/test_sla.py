"""Specifications of an ``sla:`` deadline: Digdag's time-of-day and duration rules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tickwork.shared.domain.sla import SlaSpec
from tickwork.shared.domain.workflow import TaskSpec


def utc(*fields: int) -> datetime:
    return datetime(*fields, tzinfo=UTC)


class TestTimeOfDay:
    def test_the_deadline_is_that_time_later_the_same_day(self) -> None:
        sla = SlaSpec(time="09:30:00")
        assert sla.deadline(utc(2024, 5, 1, 7, 0), "UTC") == utc(2024, 5, 1, 9, 30)

    def test_a_time_already_passed_today_means_tomorrow(self) -> None:
        sla = SlaSpec(time="02:00:00")
        assert sla.deadline(utc(2024, 5, 1, 7, 0), "UTC") == utc(2024, 5, 2, 2, 0)

    def test_a_start_exactly_at_the_time_is_its_own_deadline(self) -> None:
        # Digdag moves to the next day only when the time is *before* the start.
        sla = SlaSpec(time="07:00:00")
        assert sla.deadline(utc(2024, 5, 1, 7, 0), "UTC") == utc(2024, 5, 1, 7, 0)

    def test_the_time_is_read_on_the_workflows_clock(self) -> None:
        # 23:00Z is 08:00 the next day in Tokyo: 09:00 Tokyo is an hour later.
        sla = SlaSpec(time="09:00:00")
        assert sla.deadline(utc(2024, 5, 1, 23, 0), "Asia/Tokyo") == utc(2024, 5, 2, 0, 0)

    def test_tomorrow_keeps_the_wall_time_across_a_daylight_saving_change(self) -> None:
        # New York moves from -05:00 to -04:00 on 2024-03-10: 06:00 the next day is
        # 23 hours after 06:00 of the day before, not 24.
        sla = SlaSpec(time="06:00:00")
        started = utc(2024, 3, 9, 12, 0)  # 07:00 EST: today's 06:00 has passed
        assert sla.deadline(started, "America/New_York") == utc(2024, 3, 10, 10, 0)

    def test_a_time_the_clock_skips_means_the_end_of_the_gap(self) -> None:
        # 02:30 does not exist in New York on 2024-03-10; the clock goes 01:59:59 -> 03:00.
        sla = SlaSpec(time="02:30:00")
        started = utc(2024, 3, 10, 5, 0)  # 00:00 EST
        assert sla.deadline(started, "America/New_York") == utc(2024, 3, 10, 7, 0)

    def test_a_time_the_clock_reads_twice_means_the_first_pass_after_the_start(self) -> None:
        # New York reads 01:30 twice on 2024-11-03: at 05:30Z (EDT) and at 06:30Z (EST).
        sla = SlaSpec(time="01:30:00")
        zone = "America/New_York"
        assert sla.deadline(utc(2024, 11, 3, 4, 0), zone) == utc(2024, 11, 3, 5, 30)
        assert sla.deadline(utc(2024, 11, 3, 6, 0), zone) == utc(2024, 11, 3, 6, 30)


class TestDuration:
    @pytest.mark.parametrize("zone", ["UTC", "America/New_York", "Asia/Kolkata"])
    def test_the_deadline_is_the_duration_after_the_start_in_real_time(self, zone: str) -> None:
        # Across New York's spring-forward night: still 90 real minutes.
        started = utc(2024, 3, 10, 6, 30)
        sla = SlaSpec(duration_seconds=5400)
        assert sla.deadline(started, zone) == started + timedelta(minutes=90)


class TestStoredForm:
    def test_the_config_round_trips(self) -> None:
        group = TaskSpec("^sla", children=(TaskSpec("+notice", operator="echo", command="late"),))
        sla = SlaSpec(time="02:00:00", alert=False, fail=True, tasks=group)
        assert SlaSpec.from_config(sla.to_config()) == sla

    def test_alert_defaults_to_true_and_fail_to_false_as_in_digdag(self) -> None:
        sla = SlaSpec.from_config({"duration": 60})
        assert (sla.alert, sla.fail) == (True, False)
