"""What one scheduler pass does with one schedule: which session times to emit, which are missed.

A schedule's checkpoint is the last session time it has dealt with (emitted, or recorded
as missed). A pass looks at the times after the checkpoint whose run time has come,
drops the late ones the catch-up policy does not want (recording them as missed), skips
the ones inside spans when the schedule was inactive, and emits the rest in order, at
most ``limit`` per pass so that a long catch-up interleaves with other schedules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from tickwork.shared.domain.schedule import ScheduleSpec
from tickwork.shared.domain.schedule_policies import Catchup, MissedReason

# A time at most this far past its run time is live, not a catch-up.
LIVE_GRACE = timedelta(seconds=60)
# Counting the times in a very long missed range stops here (the count is then unknown).
COUNT_CAP = 100_000


@dataclass(frozen=True)
class MissedRange:
    """Consecutive session times not emitted, and why."""

    first: datetime
    last: datetime
    count: int | None
    reason: MissedReason


@dataclass(frozen=True)
class Span:
    """A time when the schedule was inactive: runs due in ``[start, end)`` never happen.

    ``end`` is None while the schedule is still inactive.
    """

    start: datetime
    end: datetime | None = None


@dataclass
class Pass:
    """The outcome of one pass over one schedule."""

    emit: list[datetime] = field(default_factory=list)
    missed: list[MissedRange] = field(default_factory=list)
    checkpoint: datetime | None = None
    next_session_time: datetime | None = None  # the first time not dealt with yet
    next_run_time: datetime | None = None  # when to look again; None: never (inactive, ended)


def plan_pass(
    spec: ScheduleSpec,
    checkpoint: datetime,
    now: datetime,
    *,
    seed: str = "",
    spans: Sequence[Span] = (),
    limit: int = 1000,
) -> Pass:
    """Everything due after ``checkpoint`` at ``now``, per the schedule's catch-up policy."""
    result = Pass(checkpoint=checkpoint)
    current = _drop_late(spec, checkpoint, now, seed, spans, result)
    # One walk through the times, begun anew only where an inactive span moves ahead.
    times = spec.times_after(current)
    while (following := next(times, None)) is not None:
        run = spec.run_time(following, seed)
        # Whether a time fell in an inactive span goes by its run time without jitter, as
        # every bound here does, so that skipped and missed times never overlap.
        span = _span_of(spans, spec.delayed(following))
        if span is not None and span.end is None:
            # Inactive from span.start on: nothing more is due until reactivation.
            result.next_session_time = following
            return result
        if run > now or len(result.emit) >= limit:
            result.next_session_time = following
            result.next_run_time = run if run > now else now
            return result
        if span is not None and span.end is not None:
            # Inactive then: those times never happen (they are not missed either).
            current = max(_last_before(spec, span.end) or following, following)
            result.checkpoint = current
            if current != following:
                times = spec.times_after(current)
            continue
        result.emit.append(following)
        result.checkpoint = following
    return result


def _span_of(spans: Sequence[Span], run: datetime) -> Span | None:
    for span in spans:
        if span.start <= run and (span.end is None or run < span.end):
            return span
    return None


def _last_before(spec: ScheduleSpec, instant: datetime) -> datetime | None:
    """The last session time whose run time (without jitter) is before ``instant``."""
    return spec.last_session_time(
        instant - timedelta(seconds=spec.delay_seconds) - timedelta(microseconds=1)
    )


def _drop_late(
    spec: ScheduleSpec,
    checkpoint: datetime,
    now: datetime,
    seed: str,
    spans: Sequence[Span],
    result: Pass,
) -> datetime:
    """Record the late times the policy will not emit; the checkpoint after them."""
    first = spec.next_session_time(checkpoint)
    if first is None or spec.run_time(first, seed) >= now - LIVE_GRACE:
        return checkpoint
    bound = _oldest_wanted_run(spec, checkpoint, now, seed, spans)
    if bound is None:
        return checkpoint
    last = _newest_due(spec, _last_before(spec, bound), now, seed)
    if last is None or last < first:
        return checkpoint
    # Times due while the schedule was inactive never happen: they are not missed.
    for low, high in _active_ranges(spec, first, last, spans):
        count = spec.count_between(low, high, COUNT_CAP)
        result.missed.append(MissedRange(low, high, count, MissedReason.CATCHUP))
    result.checkpoint = last
    return last


def _active_ranges(
    spec: ScheduleSpec, first: datetime, last: datetime, spans: Sequence[Span]
) -> list[tuple[datetime, datetime]]:
    """The session times in ``[first, last]`` due outside every span, as (first, last) pairs."""
    ranges: list[tuple[datetime, datetime]] = []
    low: datetime | None = first
    for span in sorted(spans, key=lambda span: span.start):
        if low is None or low > last:
            return ranges
        high = _last_before(spec, span.start)
        if high is not None and high >= low:
            ranges.append((low, min(high, last)))
        if span.end is None:
            return ranges
        inactive_last = _last_before(spec, span.end)
        if inactive_last is not None and inactive_last >= low:
            low = spec.next_session_time(inactive_last)
    if low is not None and low <= last:
        ranges.append((low, last))
    return ranges


def _oldest_wanted_run(
    spec: ScheduleSpec, checkpoint: datetime, now: datetime, seed: str, spans: Sequence[Span]
) -> datetime | None:
    """Run times before this one are dropped by the catch-up policy (None: keep all)."""
    bounds: list[datetime] = []
    if spec.catchup_window_seconds is not None:
        bounds.append(now - timedelta(seconds=spec.catchup_window_seconds))
    if spec.catchup is Catchup.NONE:
        bounds.append(now - LIVE_GRACE)
    keep = 1 if spec.catchup is Catchup.LATEST else spec.max_catchup
    if keep is not None:
        current = _newest_not_kept(spec, checkpoint, now, seed, spans, keep)
        if current is not None and current > checkpoint:
            bounds.append(spec.run_time(current, seed) + timedelta(microseconds=1))
    return max(bounds) if bounds else None


def _newest_due(
    spec: ScheduleSpec, session_time: datetime | None, now: datetime, seed: str
) -> datetime | None:
    """``session_time`` or the nearest one before it whose run time, jitter included, has come.

    Bounds are computed without jitter; this keeps a time whose jitter puts its run time
    after ``now`` from being counted as due (or dropped as missed) before it is.
    """
    current = session_time
    while current is not None and spec.run_time(current, seed) > now:
        current = spec.last_session_time(current - timedelta(microseconds=1))
    return current


def _newest_not_kept(
    spec: ScheduleSpec,
    checkpoint: datetime,
    now: datetime,
    seed: str,
    spans: Sequence[Span],
    keep: int,
) -> datetime | None:
    """Walking back from the newest due time, the first after the ``keep`` newest active ones.

    Times due inside an inactive span are passed over, not counted: they never happen.
    """
    newest = spec.last_session_time(now - timedelta(seconds=spec.delay_seconds))
    current = _newest_due(spec, newest, now, seed)
    kept = 0
    while current is not None and current > checkpoint and kept < keep:
        span = _span_of(spans, spec.delayed(current))
        if span is None:
            kept += 1
            current = spec.last_session_time(current - timedelta(microseconds=1))
        else:
            current = _last_before(spec, span.start)
    return current
