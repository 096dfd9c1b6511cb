"""What people read of schedules, defined once: the schedule list (filtered, a keyset page
at a time) and one schedule's detail, as typed records, and their JSON form.

The REST API serialises these records (:func:`schedule_json`), the web UI renders them,
and the CLI prints the REST API's JSON (or, on its operator path, :func:`schedule_json`
of the same records).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, or_, select

from tickwork.shared.display import iso_time
from tickwork.shared.domain.schedule import written_timezone
from tickwork.shared.domain.states import ScheduleState
from tickwork.shared.store import catalog
from tickwork.shared.store.owners import in_projects
from tickwork.shared.store.paging import fetch_keyset_page
from tickwork.shared.store.schedules import (
    MissedRow,
    ScheduleRow,
    get_schedule,
    list_missed,
    select_schedules,
)
from tickwork.shared.store.tables import projects, schedules

NEXT_TIMES = 5
RECENT_MISSED = 20


@dataclass(frozen=True)
class ScheduleFilters:
    """Which schedules a list holds."""

    project: str | None = None
    """Only this project's (its exact name)."""
    workflow: str | None = None
    """Only this workflow's (its exact name)."""
    q: str | None = None
    """Only those whose project or workflow name holds this text, in any case."""
    paused: bool | None = None
    """Only paused ones (True), only unpaused ones (False)."""
    include_removed: bool = False
    """Also schedules of workflows no longer in their project."""
    project_ids: frozenset[int] | None = None
    """Only those of these projects (what a token limited to projects sees); None: all."""


@dataclass(frozen=True)
class ScheduleSummary:
    """A schedule as a list shows it: its row, its state and its workflow's last session."""

    row: ScheduleRow
    last: catalog.LastSession | None

    @property
    def id(self) -> int:
        return self.row.id

    @property
    def project(self) -> str:
        return self.row.project_name

    @property
    def workflow(self) -> str:
        return self.row.workflow_name

    @property
    def description(self) -> str:
        """The schedule as its workflow file writes it (``daily>: 07:00:00``)."""
        return self.row.schedule.describe()

    @property
    def zone(self) -> str:
        """The IANA zone its session times are in."""
        return self.row.timezone

    @property
    def timezone(self) -> str:
        """Its time zone as the workflow file wrote it."""
        return written_timezone(self.row.timezone)

    @property
    def paused(self) -> bool:
        return self.row.paused_at is not None

    @property
    def state(self) -> ScheduleState:
        """Active, paused, failing or removed."""
        row = self.row
        return ScheduleState.of(
            paused=row.paused_at is not None,
            removed=row.disabled_at is not None,
            failures=row.failures,
        )


@dataclass(frozen=True)
class SchedulePage:
    """A page of schedules, newest first, and the id to list on from (None: the last)."""

    items: list[ScheduleSummary]
    next_after: int | None


@dataclass(frozen=True)
class NextTime:
    """An upcoming session time and when it is due to run (later with a delay or jitter)."""

    session_time: datetime
    run_time: datetime


@dataclass(frozen=True)
class ScheduleDetail:
    """One schedule: its summary, its next session times and its recent missed times."""

    summary: ScheduleSummary
    next_times: list[NextTime] = field(default_factory=list)
    missed: list[MissedRow] = field(default_factory=list)


def list_schedule_page(
    conn: Connection, filters: ScheduleFilters, *, after: int | None, limit: int
) -> SchedulePage:
    """A page of the schedules ``filters`` lets through, newest first, each with its
    workflow's last session; ``after``: the ``next_after`` of the page before."""
    query = select_schedules().where(in_projects(schedules.c.project_id, filters.project_ids))
    if filters.project is not None:
        query = query.where(projects.c.name == filters.project)
    if filters.workflow is not None:
        query = query.where(schedules.c.workflow_name == filters.workflow)
    if filters.q:
        query = query.where(
            or_(
                projects.c.name.icontains(filters.q, autoescape=True),
                schedules.c.workflow_name.icontains(filters.q, autoescape=True),
            )
        )
    if filters.paused is not None:
        paused_at = schedules.c.paused_at
        query = query.where(paused_at.is_not(None) if filters.paused else paused_at.is_(None))
    if not filters.include_removed:
        query = query.where(schedules.c.disabled_at.is_(None))
    page = fetch_keyset_page(conn, query, schedules.c.id, after=after, limit=limit)
    rows = [ScheduleRow(**row._mapping) for row in page.rows]
    return SchedulePage(_summaries(conn, rows), page.next_after)


def get_schedule_detail(
    conn: Connection,
    schedule_id: int,
    *,
    next_count: int = NEXT_TIMES,
    missed_limit: int = RECENT_MISSED,
) -> ScheduleDetail:
    """One schedule with its next ``next_count`` session times and its newest
    ``missed_limit`` missed ranges; NotFound if there is none."""
    row = get_schedule(conn, schedule_id)
    return ScheduleDetail(
        summary=_summaries(conn, [row])[0],
        next_times=next_times(row, next_count),
        missed=list_missed(conn, schedule_id, missed_limit),
    )


def next_times(row: ScheduleRow, count: int = NEXT_TIMES) -> list[NextTime]:
    """The schedule's next ``count`` session times, each with when it is due to run."""
    first = row.next_schedule_time
    if first is None or count < 1:
        return []
    times = [first, *row.schedule.session_times(first, count - 1)]
    return [NextTime(t, row.schedule.run_time(t, row.seed)) for t in times]


def scheduled_project_names(
    conn: Connection, limit: int, project_ids: Collection[int] | None = None
) -> list[str]:
    """The names of the first ``limit`` projects (by name) that have an active schedule
    (of the ids ``project_ids`` only; None: every project)."""
    query = (
        select(projects.c.name)
        .distinct()
        .select_from(schedules.join(projects))
        .where(schedules.c.disabled_at.is_(None), in_projects(projects.c.id, project_ids))
        .order_by(projects.c.name)
        .limit(limit)
    )
    return [str(name) for name in conn.execute(query).scalars()]


def _summaries(conn: Connection, rows: list[ScheduleRow]) -> list[ScheduleSummary]:
    last = catalog.last_sessions(conn, [(r.project_id, r.workflow_name) for r in rows])
    return [ScheduleSummary(r, last.get((r.project_id, r.workflow_name))) for r in rows]


def schedule_json(row: ScheduleRow) -> dict[str, Any]:
    """A schedule as JSON (the REST API's form): ids as strings, its times in its zone."""
    zone = row.timezone
    return {
        "id": str(row.id),
        "project": row.project_name,
        "project_id": str(row.project_id),
        "workflow": row.workflow_name,
        "workflow_definition_id": str(row.workflow_definition_id),
        "schedule": row.schedule.describe(),
        "spec": row.spec,
        "timezone": written_timezone(zone),
        "state": ScheduleSummary(row, None).state.value,
        "next_run_time": iso_time(row.next_run_time, zone),
        "next_session_time": iso_time(row.next_schedule_time, zone),
        "checkpoint": iso_time(row.last_session_time, zone),
        "paused": row.paused_at is not None,
        "paused_at": iso_time(row.paused_at, zone),
        "disabled": row.disabled_at is not None,
        "disabled_at": iso_time(row.disabled_at, zone),
        "failures": row.failures,
        "last_error": row.last_error,
    }


def summary_json(summary: ScheduleSummary) -> dict[str, Any]:
    """A listed schedule as JSON: :func:`schedule_json` and its workflow's last session."""
    return {
        **schedule_json(summary.row),
        "last_session": last_session_json(summary.last, summary.row.timezone),
    }


def last_session_json(last: catalog.LastSession | None, zone: str | None) -> dict[str, Any] | None:
    """A workflow's last session as JSON (None for none), its time in ``zone`` (else UTC)."""
    if last is None:
        return None
    return {
        "id": str(last.session_id),
        "session_time": iso_time(last.session_time, zone),
        "attempt_id": None if last.attempt_id is None else str(last.attempt_id),
        "state": last.state,
    }


def missed_json(item: MissedRow, zone: str) -> dict[str, Any]:
    """A missed range as JSON, its times in the schedule's zone ``zone``."""
    return {
        "first_session_time": iso_time(item.first_session_time, zone),
        "last_session_time": iso_time(item.last_session_time, zone),
        "count": item.count,
        "reason": item.reason.value,
        "recorded_at": iso_time(item.recorded_at, zone),
    }


def detail_json(detail: ScheduleDetail) -> dict[str, Any]:
    """One schedule as JSON: its summary, next times and recent missed ranges."""
    zone = detail.summary.row.timezone
    return {
        **summary_json(detail.summary),
        "next_times": [
            {
                "session_time": iso_time(t.session_time, zone),
                "run_time": iso_time(t.run_time, zone),
            }
            for t in detail.next_times
        ],
        "missed": [missed_json(item, zone) for item in detail.missed],
    }
