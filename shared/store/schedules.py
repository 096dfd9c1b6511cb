"""Schedules: their rows, activation history, missed times, and the controls users have.

A schedule's ``last_session_time`` is its checkpoint: every session time up to it has been
emitted or recorded as missed. ``next_run_time`` says when a scheduler should look at it
again; any change made here sets it to now so that the next scheduler pass re-plans.
What a scheduler pass itself reads and writes is in :mod:`tickwork.shared.store.emission`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any

from sqlalchemy import Connection, RowMapping, select

from tickwork.shared.domain.catchup import COUNT_CAP, MissedRange
from tickwork.shared.domain.choices import parse_choice
from tickwork.shared.domain.schedule import ScheduleSpec
from tickwork.shared.domain.schedule_policies import InactiveReason, MissedReason
from tickwork.shared.domain.workflow import WorkflowDefinition
from tickwork.shared.errors import Conflict, NotFound
from tickwork.shared.store.tables import (
    projects,
    schedule_inactive_spans,
    schedule_missed,
    schedules,
)

EPSILON = timedelta(microseconds=1)
MAX_SKIP = 10_000
"""The most session times one skip passes over."""


@dataclass(frozen=True)
class ScheduleRow:
    """One schedule with its project: what a scheduler pass and a listing need."""

    id: int
    project_id: int
    project_name: str
    project_dir: str | None
    workflow_name: str
    workflow_definition_id: int
    spec: dict[str, Any]
    timezone: str
    next_run_time: datetime | None
    next_schedule_time: datetime | None
    last_session_time: datetime | None
    disabled_at: datetime | None
    paused_at: datetime | None
    failures: int
    last_error: str | None

    @cached_property
    def schedule(self) -> ScheduleSpec:
        """The parsed spec."""
        return ScheduleSpec.from_config(self.spec)

    @property
    def seed(self) -> str:
        """The schedule's identity for jitter: the same on every replica."""
        return f"{self.project_name}/{self.workflow_name}"

    @property
    def inactive_since(self) -> datetime | None:
        """When the schedule stopped being active, if it is inactive now."""
        marks = [mark for mark in (self.disabled_at, self.paused_at) if mark is not None]
        return min(marks) if marks else None


def schedule_columns(source: Any, spec: Any = None) -> tuple[Any, ...]:
    """What a ScheduleRow holds, read from ``source`` (``schedules`` or a subquery of it)."""
    return (
        source.c.id,
        source.c.project_id,
        projects.c.name.label("project_name"),
        projects.c.source_dir.label("project_dir"),
        source.c.workflow_name,
        source.c.workflow_definition_id,
        source.c.spec if spec is None else spec.label("spec"),
        source.c.timezone,
        source.c.next_run_time,
        source.c.next_schedule_time,
        source.c.last_session_time,
        source.c.disabled_at,
        source.c.paused_at,
        source.c.failures,
        source.c.last_error,
    )


SCHEDULE_COLUMNS = schedule_columns(schedules)
# Rows are built by name: the columns are named after ScheduleRow's fields.
assert [c.name for c in SCHEDULE_COLUMNS] == [f.name for f in fields(ScheduleRow)]


def schedule_rows(conn: Connection, query: Any) -> list[ScheduleRow]:
    return [ScheduleRow(**row._mapping) for row in conn.execute(query).all()]


def select_schedules() -> Any:
    return select(*SCHEDULE_COLUMNS).select_from(schedules.join(projects))


def list_schedules(
    conn: Connection, *, project_id: int | None = None, include_removed: bool = False
) -> list[ScheduleRow]:
    """Schedules ordered by project and workflow name."""
    query = select_schedules().order_by(projects.c.name, schedules.c.workflow_name)
    if project_id is not None:
        query = query.where(schedules.c.project_id == project_id)
    if not include_removed:
        query = query.where(schedules.c.disabled_at.is_(None))
    return schedule_rows(conn, query)


def get_schedule(conn: Connection, schedule_id: int) -> ScheduleRow:
    """One schedule; NotFound if there is none."""
    found = schedule_rows(conn, select_schedules().where(schedules.c.id == schedule_id))
    if not found:
        raise NotFound(f"schedule {schedule_id} does not exist")
    return found[0]


def schedules_by_id(conn: Connection, schedule_ids: Collection[int]) -> dict[int, ScheduleRow]:
    """Many schedules in one query, by id (missing ids are left out)."""
    if not schedule_ids:
        return {}
    query = select_schedules().where(schedules.c.id.in_(list(schedule_ids)))
    return {row.id: row for row in schedule_rows(conn, query)}


def find_schedule(conn: Connection, project: str, workflow: str) -> ScheduleRow:
    """The schedule of ``project``'s ``workflow``; NotFound naming what is missing."""
    query = select_schedules().where(
        projects.c.name == project, schedules.c.workflow_name == workflow
    )
    found = schedule_rows(conn, query)
    if not found:
        raise NotFound(f"project '{project}' has no schedule for workflow '{workflow}'")
    return found[0]


def record_missed(
    conn: Connection, schedule_id: int, missed: Iterable[MissedRange], now: datetime
) -> int:
    """Store missed ranges; returns how many times they hold (unknown counts as one)."""
    missed = list(missed)
    rows = [
        {
            "schedule_id": schedule_id,
            "first_session_time": item.first,
            "last_session_time": item.last,
            "count": item.count,
            "reason": item.reason,
            "recorded_at": now,
        }
        for item in missed
    ]
    if rows:
        conn.execute(schedule_missed.insert(), rows)
    return sum(item.count or 1 for item in missed)


@dataclass(frozen=True)
class MissedRow:
    """A stored missed range."""

    first_session_time: datetime
    last_session_time: datetime
    count: int | None
    reason: MissedReason
    recorded_at: datetime


def list_missed(conn: Connection, schedule_id: int, limit: int = 100) -> list[MissedRow]:
    """The newest missed ranges of a schedule, newest first."""
    query = (
        select(
            schedule_missed.c.first_session_time,
            schedule_missed.c.last_session_time,
            schedule_missed.c.count,
            schedule_missed.c.reason,
            schedule_missed.c.recorded_at,
        )
        .where(schedule_missed.c.schedule_id == schedule_id)
        .order_by(schedule_missed.c.first_session_time.desc())
        .limit(limit)
    )
    return [_missed_row(row._mapping) for row in conn.execute(query)]


def _missed_row(values: RowMapping) -> MissedRow:
    reason = parse_choice(MissedReason, values["reason"], "schedule_missed.reason")
    return MissedRow(**{**values, "reason": reason})


def upsert_schedule(
    conn: Connection,
    *,
    project_id: int,
    definition_id: int,
    definition: WorkflowDefinition,
    now: datetime,
    schedule_from: datetime | None = None,
) -> None:
    """Store (or update) the schedule of a workflow from a new revision.

    A new schedule starts with the first session time after now, or at ``schedule_from``.
    A changed ``schedule:`` applies to the times after now; times the old one had due
    but no scheduler emitted are recorded as missed (``edited``). A workflow added again
    after removal gets nothing for the time it was gone.
    """
    if definition.schedule is None:
        remove_schedules(conn, project_id, [definition.name], now)
        return
    existing = conn.execute(
        select(schedules).where(
            schedules.c.project_id == project_id, schedules.c.workflow_name == definition.name
        )
    ).one_or_none()
    values = {
        "workflow_definition_id": definition_id,
        "spec": definition.schedule,
        "timezone": definition.timezone,
        "updated_at": now,
    }
    spec = ScheduleSpec.from_config(definition.schedule)
    if existing is None:
        start = now if schedule_from is None else schedule_from - EPSILON
        conn.execute(
            schedules.insert().values(
                project_id=project_id,
                workflow_name=definition.name,
                created_at=now,
                last_session_time=start,
                next_schedule_time=spec.next_session_time(start),
                next_run_time=now,
                **values,
            )
        )
        return
    if existing.disabled_at is not None:
        _close_span(conn, existing.id, existing.disabled_at, now, InactiveReason.REMOVED)
        values.update(disabled_at=None, next_run_time=now)
    if existing.spec != definition.schedule:
        _record_edit(conn, existing, now)
        checkpoint = existing.last_session_time
        checkpoint = now if checkpoint is None else max(checkpoint, now)
        values.update(
            last_session_time=checkpoint,
            next_schedule_time=spec.next_session_time(checkpoint),
            next_run_time=now,
        )
    conn.execute(schedules.update().where(schedules.c.id == existing.id).values(**values))


def _record_edit(conn: Connection, existing: Any, now: datetime) -> None:
    old = ScheduleSpec.from_config(existing.spec)
    checkpoint = existing.last_session_time
    if checkpoint is None or existing.disabled_at is not None or existing.paused_at is not None:
        return
    first = old.next_session_time(checkpoint)
    last = old.last_session_time(now - timedelta(seconds=old.delay_seconds))
    if first is not None and last is not None and first <= last:
        count = old.count_between(first, last, COUNT_CAP)
        record_missed(
            conn, existing.id, [MissedRange(first, last, count, MissedReason.EDITED)], now
        )


def remove_schedules(
    conn: Connection, project_id: int, workflow_names: Collection[str], now: datetime
) -> int:
    """Deactivate the schedules of removed workflows; times due before now still run."""
    result = conn.execute(
        schedules.update()
        .where(
            schedules.c.project_id == project_id,
            schedules.c.workflow_name.in_(list(workflow_names)),
            schedules.c.disabled_at.is_(None),
        )
        .values(disabled_at=now, next_run_time=now, updated_at=now)
    )
    return int(result.rowcount)


def remove_schedules_except(
    conn: Connection, project_id: int, keep: Collection[str], now: datetime
) -> int:
    """Deactivate every schedule of a project whose workflow is not in ``keep``."""
    query = select(schedules.c.workflow_name).where(
        schedules.c.project_id == project_id, schedules.c.workflow_name.not_in(list(keep))
    )
    names = [str(name) for name in conn.execute(query).scalars()]
    return remove_schedules(conn, project_id, names, now) if names else 0


def _close_span(
    conn: Connection,
    schedule_id: int,
    started_at: datetime,
    ended_at: datetime,
    reason: InactiveReason,
) -> None:
    if ended_at > started_at:
        conn.execute(
            schedule_inactive_spans.insert().values(
                schedule_id=schedule_id, started_at=started_at, ended_at=ended_at, reason=reason
            )
        )


def pause_schedule(conn: Connection, schedule_id: int, now: datetime) -> bool:
    """Pause a schedule: runs due from now on do not happen. False if already paused."""
    result = conn.execute(
        schedules.update()
        .where(schedules.c.id == schedule_id, schedules.c.paused_at.is_(None))
        .values(paused_at=now, next_run_time=now, updated_at=now)
    )
    return result.rowcount == 1


def resume_schedule(
    conn: Connection, schedule_id: int, now: datetime, *, replay: bool = False
) -> bool:
    """Resume a paused schedule; the paused span is skipped unless ``replay``.

    A replayed span is emitted under the catch-up policy like any downtime. False if
    the schedule was not paused.
    """
    row = get_schedule(conn, schedule_id)
    if row.paused_at is None:
        return False
    if not replay:
        _close_span(conn, schedule_id, row.paused_at, now, InactiveReason.PAUSED)
    conn.execute(
        schedules.update()
        .where(schedules.c.id == schedule_id)
        .values(paused_at=None, next_run_time=now, updated_at=now)
    )
    return True


def skip_schedule(
    conn: Connection,
    schedule_id: int,
    now: datetime,
    *,
    to: datetime | None = None,
    count: int | None = None,
) -> list[datetime]:
    """Skip upcoming session times: up to (not including) ``to``, or the next ``count``.

    The skipped times are recorded as missed (``skipped``), so a backfill can still run
    them. Returns the skipped session times. Raises Conflict, skipping nothing, when more
    than MAX_SKIP lie before ``to``.
    """
    if (to is None) == (count is None):
        raise ValueError("skip_schedule takes either 'to' or 'count'")
    row = get_schedule(conn, schedule_id)
    spec = row.schedule
    skipped: list[datetime] = []
    current = row.last_session_time or now
    while True:
        following = spec.next_session_time(current)
        if following is None or (to is not None and following >= to):
            break
        if len(skipped) == (MAX_SKIP if count is None else count):
            if to is not None:
                raise Conflict(f"more than {MAX_SKIP} session times lie before it; skip fewer")
            break
        skipped.append(following)
        current = following
    if skipped:
        missed = MissedRange(skipped[0], skipped[-1], len(skipped), MissedReason.SKIPPED)
        record_missed(conn, schedule_id, [missed], now)
        conn.execute(
            schedules.update()
            .where(schedules.c.id == schedule_id)
            .values(
                last_session_time=skipped[-1],
                next_schedule_time=following,  # the loop stopped after skipped[-1]
                next_run_time=now,
                updated_at=now,
            )
        )
    return skipped
