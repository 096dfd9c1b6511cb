"""Specification of one scheduler pass: what is emitted, what is recorded missed, and why."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tickwork.shared.domain.catchup import LIVE_GRACE, MissedRange, Pass, Span, plan_pass
from tickwork.shared.domain.instants import LATEST
from tickwork.shared.domain.schedule import ScheduleSpec, parse_schedule

DAY0 = datetime(2026, 1, 1, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
SEED = "project/workflow"
HOURLY: dict[str, Any] = {"cron>": "0 * * * *"}


def hourly(**options: Any) -> ScheduleSpec:
    return parse_schedule({**HOURLY, **options}, "UTC")


def at(hours: float) -> datetime:
    """``hours`` after DAY0."""
    return DAY0 + timedelta(hours=hours)


def hours(first: int, last: int) -> list[datetime]:
    """The hourly session times from ``at(first)`` to ``at(last)``, both included."""
    return [at(n) for n in range(first, last + 1)]


def catchup_missed(first: int, last: int) -> MissedRange:
    return MissedRange(at(first), at(last), last - first + 1, "catchup")


def passes_until_caught_up(
    spec: ScheduleSpec, checkpoint: datetime, now: datetime, **kw: Any
) -> list[Pass]:
    """Passes at ``now`` while the last one asks to be run again straight away."""
    done: list[Pass] = []
    while not done or done[-1].next_run_time == now:
        assert len(done) < 1000, "a pass must make progress"
        done.append(plan_pass(spec, checkpoint, now, **kw))
        assert done[-1].checkpoint is not None
        checkpoint = done[-1].checkpoint
    return done


class TestLiveTicks:
    def test_a_live_tick_emits_exactly_the_one_due_time(self) -> None:
        # Given the scheduler dealt with 10:00, when it ticks just after 11:00
        result = plan_pass(hourly(), at(10), at(11) + timedelta(seconds=5))
        # Then it emits 11:00 alone and looks again at 12:00
        assert result.emit == [at(11)]
        assert result.missed == []
        assert (result.checkpoint, result.next_session_time, result.next_run_time) == (
            at(11),
            at(12),
            at(12),
        )

    def test_a_tick_before_the_next_run_time_emits_nothing(self) -> None:
        result = plan_pass(hourly(), at(10), at(10.5))
        assert (result.emit, result.missed, result.checkpoint) == ([], [], at(10))
        assert result.next_run_time == at(11)

    def test_a_session_is_due_at_its_run_time_not_its_session_time(self) -> None:
        spec = parse_schedule({"daily>": "07:00:00"}, "UTC")
        assert plan_pass(spec, at(0), at(24 + 6.99)).emit == []
        assert plan_pass(spec, at(0), at(24 + 6.99)).next_run_time == at(24 + 7)
        assert plan_pass(spec, at(0), at(24 + 7)).emit == [at(24)]

    def test_a_jittered_session_waits_for_its_own_run_time(self) -> None:
        spec = hourly(jitter="30m")
        run = spec.run_time(at(11), "project/7")
        assert run > at(11)  # this seed's jitter for 11:00 is not zero
        early = plan_pass(spec, at(10), run - timedelta(seconds=1), seed="project/7")
        assert (early.emit, early.next_run_time) == ([], run)
        assert plan_pass(spec, at(10), run, seed="project/7").emit == [at(11)]

    @pytest.mark.parametrize(
        "options", [{}, {"catchup": "none"}, {"catchup": "latest"}, {"max_catchup": 1}]
    )
    def test_a_time_up_to_a_minute_late_is_live_under_every_policy(
        self, options: dict[str, Any]
    ) -> None:
        result = plan_pass(hourly(**options), at(10), at(11) + LIVE_GRACE)
        assert (result.emit, result.missed) == ([at(11)], [])


class TestCatchupPolicy:
    def test_all_drops_times_older_than_the_default_day_as_one_missed_range(self) -> None:
        # Given the scheduler was down for two days
        result = plan_pass(hourly(), at(0), at(48) + timedelta(minutes=10))
        # Then the first day's times are one missed range and the last day's are emitted
        assert result.missed == [catchup_missed(1, 24)]
        assert result.emit == hours(25, 48)
        assert (result.checkpoint, result.next_run_time) == (at(48), at(49))

    def test_the_catchup_window_sets_the_age_limit(self) -> None:
        result = plan_pass(hourly(catchup_window="3h"), at(0), at(10) + timedelta(minutes=10))
        assert result.missed == [catchup_missed(1, 7)]
        assert result.emit == hours(8, 10)

    def test_without_a_window_every_late_time_is_emitted_in_batches(self) -> None:
        # Given three days down with no age limit, and at most 25 times per pass
        spec = hourly(catchup_window="none")
        now = at(72) + timedelta(minutes=10)
        done = passes_until_caught_up(spec, at(0), now, limit=25)
        # Then every time is emitted, in order, over several passes that each ask to rerun now
        assert [len(p.emit) for p in done] == [25, 25, 22]
        assert [t for p in done for t in p.emit] == hours(1, 72)
        assert all(p.missed == [] for p in done)
        assert [p.next_run_time for p in done] == [now, now, at(73)]
        assert [p.checkpoint for p in done] == [at(25), at(50), at(72)]

    def test_latest_keeps_only_the_newest_due_time(self) -> None:
        result = plan_pass(hourly(catchup="latest"), at(0), at(5) + timedelta(minutes=10))
        assert result.emit == [at(5)]
        assert result.missed == [catchup_missed(1, 4)]

    def test_none_keeps_only_the_live_time(self) -> None:
        result = plan_pass(hourly(catchup="none"), at(0), at(5) + timedelta(seconds=30))
        assert result.emit == [at(5)]
        assert result.missed == [catchup_missed(1, 4)]

    def test_none_emits_nothing_when_every_due_time_is_late(self) -> None:
        result = plan_pass(hourly(catchup="none"), at(0), at(5) + timedelta(minutes=10))
        assert result.emit == []
        assert result.missed == [catchup_missed(1, 5)]
        assert (result.checkpoint, result.next_run_time) == (at(5), at(6))

    def test_max_catchup_keeps_the_newest_n(self) -> None:
        result = plan_pass(hourly(max_catchup=3), at(0), at(10) + timedelta(minutes=10))
        assert result.emit == hours(8, 10)
        assert result.missed == [catchup_missed(1, 7)]

    def test_the_strictest_of_window_and_max_catchup_wins(self) -> None:
        spec = hourly(catchup_window="2h", max_catchup=5)
        result = plan_pass(spec, at(0), at(10) + timedelta(minutes=10))
        assert result.emit == hours(9, 10)


class TestJitteredCatchup:
    """A time is due at its run time with jitter: before that it is neither emitted nor missed."""

    @staticmethod
    def just_before_five(spec: ScheduleSpec) -> datetime:
        run = spec.run_time(at(5), SEED)
        assert run - at(5) > LIVE_GRACE  # this seed's jitter for 05:00 is a few minutes
        return run - timedelta(seconds=1)

    @pytest.mark.parametrize("options", [{"max_catchup": 0}, {"catchup_window": "0s"}])
    def test_a_time_still_waiting_for_its_jitter_is_not_dropped(
        self, options: dict[str, Any]
    ) -> None:
        spec = hourly(jitter="30m", **options)
        now = self.just_before_five(spec)
        result = plan_pass(spec, at(0), now, seed=SEED)
        assert result.missed == [catchup_missed(1, 4)]
        assert (result.emit, result.next_session_time) == ([], at(5))
        assert result.next_run_time == now + timedelta(seconds=1)

    def test_latest_keeps_the_newest_time_that_is_due(self) -> None:
        spec = hourly(catchup="latest", jitter="30m")
        result = plan_pass(spec, at(0), self.just_before_five(spec), seed=SEED)
        assert result.emit == [at(4)]
        assert result.missed == [catchup_missed(1, 3)]
        assert result.next_session_time == at(5)


class TestInactiveSpans:
    def test_times_due_while_inactive_are_skipped_and_not_missed(self) -> None:
        # Given the schedule was paused from 02:30 to 06:30 while the scheduler was down
        spec = hourly(catchup_window="none")
        result = plan_pass(
            spec, at(0), at(8) + timedelta(minutes=10), spans=[Span(at(2.5), at(6.5))]
        )
        # Then the times around the pause are emitted and the paused ones simply never happen
        assert result.emit == [at(1), at(2), at(7), at(8)]
        assert result.missed == []
        assert result.checkpoint == at(8)

    def test_inactive_times_older_than_the_window_are_not_missed_either(self) -> None:
        # Given a pause from 00:30 on day 0 to 06:00 on day 1, and the scheduler down for two days
        span = Span(at(0.5), at(30))
        result = plan_pass(hourly(), at(0), at(48) + timedelta(minutes=10), spans=[span])
        # Then nothing is missed: every time the window drops was due while paused
        assert result.missed == []
        assert result.emit == hours(30, 48)

    def test_a_window_split_by_a_pause_is_missed_on_both_sides_of_it(self) -> None:
        span = Span(at(5.5), at(10.5))
        result = plan_pass(hourly(), at(0), at(48) + timedelta(minutes=10), spans=[span])
        assert result.missed == [catchup_missed(1, 5), catchup_missed(11, 24)]
        assert result.emit == hours(25, 48)

    def test_an_open_span_stops_the_pass_at_its_start_without_a_next_run_time(self) -> None:
        # Given the schedule was deactivated at 02:30 and is still inactive
        result = plan_pass(hourly(), at(0), at(5) + timedelta(minutes=10), spans=[Span(at(2.5))])
        # Then the times due while it was active are emitted and it is not looked at again
        assert result.emit == [at(1), at(2)]
        assert (result.checkpoint, result.next_session_time, result.next_run_time) == (
            at(2),
            at(3),
            None,
        )

    def test_an_open_span_is_not_missed_when_the_window_drops_older_times(self) -> None:
        result = plan_pass(hourly(), at(0), at(48) + timedelta(minutes=10), spans=[Span(at(2.5))])
        assert result.missed == [catchup_missed(1, 2)]
        assert result.emit == []
        assert result.next_run_time is None

    def test_latest_keeps_the_newest_time_due_while_active(self) -> None:
        # Given deactivation at 02:30, the newest due time it had while active was 02:00
        spec = hourly(catchup="latest")
        result = plan_pass(spec, at(0), at(5) + timedelta(minutes=10), spans=[Span(at(2.5))])
        assert result.emit == [at(2)]
        assert result.missed == [catchup_missed(1, 1)]


class TestEndOfSchedule:
    def test_a_schedule_past_its_end_is_never_looked_at_again(self) -> None:
        spec = hourly(end="2026-01-01")
        result = plan_pass(spec, at(20), at(30))
        assert result.emit == hours(21, 23)
        assert (result.next_session_time, result.next_run_time) == (None, None)

    def test_an_ended_schedule_still_records_what_the_window_dropped(self) -> None:
        result = plan_pass(hourly(end="2026-01-01"), at(0), at(48))
        assert result.missed == [catchup_missed(1, 23)]
        assert (result.emit, result.next_run_time) == ([], None)

    def test_a_schedule_reaching_the_end_of_the_accepted_range_ends_there(self) -> None:
        # Given an hourly schedule with a day's delay, two hours before the last accepted time
        spec = hourly(delay="1d")
        checkpoint = datetime(9999, 12, 30, 21, tzinfo=UTC)
        before = plan_pass(spec, checkpoint, LATEST - timedelta(seconds=1))
        # Then its run times, a day later, are the last accepted instant: not yet due
        assert before.emit == []
        assert before.next_run_time == LATEST
        # When a pass runs at that instant
        result = plan_pass(spec, checkpoint, LATEST)
        # Then both last session times are emitted and the schedule has ended
        assert result.emit == [datetime(9999, 12, 30, h, tzinfo=UTC) for h in (22, 23)]
        assert (result.next_session_time, result.next_run_time) == (None, None)


POLICIES = st.fixed_dictionaries(
    {},
    optional={
        "catchup": st.sampled_from(["all", "latest", "none"]),
        "catchup_window": st.sampled_from(["none", "0s", "90m", "1d"]),
        "max_catchup": st.integers(0, 5),
        "delay": st.sampled_from([0, 600]),
        "jitter": st.sampled_from([0, 300]),  # below the period: run times stay in order
    },
)


@st.composite
def downtimes(draw: st.DrawFn) -> tuple[ScheduleSpec, datetime, list[Span], list[Pass]]:
    """A half-hourly schedule with a random policy, caught up after a random downtime."""
    spec = parse_schedule({"cron>": "*/30 * * * *", **draw(POLICIES)}, "UTC")
    now = at(0) + timedelta(minutes=draw(st.integers(0, 48 * 60)))
    spans: list[Span] = []
    for _ in range(draw(st.integers(0, 2))):
        pause_start = at(0) + timedelta(minutes=draw(st.integers(0, 48 * 60)))
        pause = draw(st.one_of(st.none(), st.integers(1, 1200)))
        spans.append(Span(pause_start, None if pause is None else pause_start + pause * MINUTE))
    limit = draw(st.integers(1, 30))
    done = passes_until_caught_up(spec, at(0), now, seed=SEED, spans=spans, limit=limit)
    return spec, now, spans, done


def inactive_at(spans: list[Span], run: datetime) -> bool:
    return any(s.start <= run and (s.end is None or run < s.end) for s in spans)


def expand(spec: ScheduleSpec, missed: MissedRange) -> list[datetime]:
    found = spec.session_times(missed.first - timedelta(microseconds=1), 200)
    return [t for t in found if t <= missed.last]


class TestAccounting:
    @pytest.mark.slow  # seconds of work: left out of make test-fast
    @settings(max_examples=100, deadline=None)
    @given(downtimes())
    def test_every_due_time_is_emitted_or_missed_once_unless_due_while_inactive(
        self, caught_up: tuple[ScheduleSpec, datetime, list[Span], list[Pass]]
    ) -> None:
        spec, now, spans, done = caught_up
        emitted = [t for p in done for t in p.emit]
        missed = [t for p in done for m in p.missed for t in expand(spec, m)]
        due = [t for t in spec.session_times(at(0), 200) if spec.run_time(t, SEED) <= now]
        # An inactive span holds the times whose run time before jitter falls in it.
        nominal_delay = timedelta(seconds=spec.delay_seconds)
        inactive = [t for t in due if inactive_at(spans, t + nominal_delay)]
        assert emitted == sorted(set(emitted))
        assert sorted(emitted + missed + inactive) == due
        assert all(m.count == len(expand(spec, m)) for p in done for m in p.missed)
        assert all(m.reason == "catchup" for p in done for m in p.missed)

    @settings(max_examples=100, deadline=None)
    @given(downtimes())
    def test_each_policy_bounds_what_a_catch_up_emits(
        self, caught_up: tuple[ScheduleSpec, datetime, list[Span], list[Pass]]
    ) -> None:
        spec, now, _, done = caught_up
        late = [now - spec.run_time(t, SEED) for p in done for t in p.emit]
        if spec.catchup == "none":
            assert all(lateness <= LIVE_GRACE for lateness in late)
        if spec.catchup == "latest":
            assert len(late) <= 1
        if spec.max_catchup is not None:
            assert len(late) <= max(spec.max_catchup, 1)
        if spec.catchup_window_seconds is not None:
            window = timedelta(seconds=spec.catchup_window_seconds)
            assert all(lateness <= max(window, LIVE_GRACE) for lateness in late)
