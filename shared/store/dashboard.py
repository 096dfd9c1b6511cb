"""What the web UI's overview and workflow pages read: recent failures with the task that
failed, schedules due next or needing attention, missed times, and the tasks of a page of
attempts for the workflow's grid.

Every query is bounded (a LIMIT, or an IN list of a page's ids) and uses an index, so the
pages cost the same on a store of a few sessions and on one of many.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, exists, func, or_, select
from sqlalchemy.orm import aliased

from tickwork.shared.domain.states import AttemptState, TaskState
from tickwork.shared.store.history import AttemptView, _attempt_query, attempt_view
from tickwork.shared.store.owners import in_projects
from tickwork.shared.store.tables import (
    attempts,
    projects,
    schedule_missed,
    schedules,
    sessions,
    tasks,
    workflow_definitions,
)


@dataclass(frozen=True)
class FailedTask:
    """A task where an attempt failed: in error, and not only because a child was."""

    attempt_id: int
    task_id: int
    full_name: str
    message: str


@dataclass(frozen=True)
class Failure:
    """An attempt that ended in error and the tasks where it failed."""

    attempt: AttemptView
    tasks: list[FailedTask]


def error_message(error: dict[str, Any] | None) -> str:
    """The message of a task's stored error (``failed`` if it has none)."""
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])
    return "failed"


def recent_failures(
    conn: Connection, since: datetime, limit: int, project_ids: Collection[int] | None = None
) -> list[Failure]:
    """Attempts that ended in error from ``since`` on, newest first, that are still their
    session's latest attempt (a retry that followed hides a failure), each with the tasks
    where it failed; of the projects ``project_ids`` only (None: every project)."""
    newer = aliased(attempts, name="newer")
    query = (
        _attempt_query()
        .where(
            attempts.c.state == AttemptState.ERROR.value,
            attempts.c.finished_at >= since,
            ~exists().where(
                newer.c.session_id == attempts.c.session_id, newer.c.id > attempts.c.id
            ),
            in_projects(sessions.c.project_id, project_ids),
        )
        .order_by(attempts.c.id.desc())
        .limit(limit)
    )
    found = [attempt_view(row) for row in conn.execute(query)]
    by_attempt = failed_tasks(conn, [attempt.id for attempt in found])
    return [Failure(attempt, by_attempt.get(attempt.id, [])) for attempt in found]


def failed_tasks(conn: Connection, attempt_ids: Collection[int]) -> dict[int, list[FailedTask]]:
    """The tasks in error without a child in error of each attempt, by attempt id, in
    creation order: where to look first."""
    if not attempt_ids:
        return {}
    child = aliased(tasks, name="child")
    query = (
        select(tasks.c.id, tasks.c.attempt_id, tasks.c.full_name, tasks.c.error)
        .where(
            tasks.c.attempt_id.in_(sorted(attempt_ids)),
            tasks.c.state == TaskState.ERROR.value,
            ~exists().where(
                child.c.parent_id == tasks.c.id, child.c.state == TaskState.ERROR.value
            ),
        )
        .order_by(tasks.c.id)
    )
    found: dict[int, list[FailedTask]] = {}
    for row in conn.execute(query):
        found.setdefault(int(row.attempt_id), []).append(
            FailedTask(int(row.attempt_id), int(row.id), row.full_name, error_message(row.error))
        )
    return found


@dataclass(frozen=True)
class ScheduleStatus:
    """A live schedule, its next times, and how its latest session's last attempt ended."""

    id: int
    project_name: str
    workflow_name: str
    timezone: str
    next_run_time: datetime | None
    next_schedule_time: datetime | None
    paused_at: datetime | None
    failures: int
    last_error: str | None
    last_attempt_id: int | None
    last_state: str | None

    @property
    def last_failed(self) -> bool:
        """Whether the latest session of the schedule ended in error."""
        return self.last_state == AttemptState.ERROR.value


def _latest_session_id() -> Any:
    return (
        select(sessions.c.id)
        .where(sessions.c.schedule_id == schedules.c.id)
        .order_by(sessions.c.session_time.desc())
        .limit(1)
        .correlate(schedules)
        .scalar_subquery()
    )


# The last attempt of a schedule's latest session.
_LAST = aliased(attempts, name="last")


def _status_query(project_ids: Collection[int] | None) -> Any:
    latest = aliased(attempts, name="latest")
    latest_attempt_id = (
        select(latest.c.id)
        .where(latest.c.session_id == _latest_session_id())
        .order_by(latest.c.id.desc())
        .limit(1)
        .correlate(schedules)
        .scalar_subquery()
    )
    return (
        select(
            schedules.c.id,
            projects.c.name.label("project_name"),
            schedules.c.workflow_name,
            schedules.c.timezone,
            schedules.c.next_run_time,
            schedules.c.next_schedule_time,
            schedules.c.paused_at,
            schedules.c.failures,
            schedules.c.last_error,
            _LAST.c.id.label("last_attempt_id"),
            _LAST.c.state.label("last_state"),
        )
        .select_from(
            schedules.join(projects, projects.c.id == schedules.c.project_id).outerjoin(
                _LAST, _LAST.c.id == latest_attempt_id
            )
        )
        .where(
            schedules.c.disabled_at.is_(None),
            projects.c.deleted_at.is_(None),
            in_projects(schedules.c.project_id, project_ids),
        )
    )


def _statuses(conn: Connection, query: Any) -> list[ScheduleStatus]:
    return [ScheduleStatus(**row._mapping) for row in conn.execute(query)]


def next_runs(
    conn: Connection, limit: int, project_ids: Collection[int] | None = None
) -> list[ScheduleStatus]:
    """The active schedules that run soonest, soonest first (of the projects
    ``project_ids`` only; None: every project)."""
    query = (
        _status_query(project_ids)
        .where(schedules.c.paused_at.is_(None), schedules.c.next_run_time.is_not(None))
        .order_by(schedules.c.next_run_time, schedules.c.id)
        .limit(limit)
    )
    return _statuses(conn, query)


def troubled_schedules(
    conn: Connection, limit: int, project_ids: Collection[int] | None = None
) -> list[ScheduleStatus]:
    """Schedules that are paused, that the scheduler failed on, or whose latest session
    ended in error, by project and workflow (of the projects ``project_ids`` only)."""
    query = _status_query(project_ids).order_by(projects.c.name, schedules.c.workflow_name)
    query = query.where(
        or_(
            schedules.c.paused_at.is_not(None),
            schedules.c.failures > 0,
            _LAST.c.state == AttemptState.ERROR.value,
        )
    )
    return _statuses(conn, query.limit(limit))


@dataclass(frozen=True)
class MissedTimes:
    """A range of session times a schedule did not run, and why."""

    schedule_id: int
    project_name: str
    workflow_name: str
    timezone: str
    first_session_time: datetime
    last_session_time: datetime
    count: int | None
    reason: str
    recorded_at: datetime


def recent_missed(
    conn: Connection, limit: int, project_ids: Collection[int] | None = None
) -> list[MissedTimes]:
    """The missed ranges recorded last, newest first (of the projects ``project_ids``
    only; None: every project)."""
    query = (
        select(
            schedule_missed.c.schedule_id,
            projects.c.name.label("project_name"),
            schedules.c.workflow_name,
            schedules.c.timezone,
            schedule_missed.c.first_session_time,
            schedule_missed.c.last_session_time,
            schedule_missed.c.count,
            schedule_missed.c.reason,
            schedule_missed.c.recorded_at,
        )
        .select_from(
            schedule_missed.join(schedules, schedules.c.id == schedule_missed.c.schedule_id).join(
                projects, projects.c.id == schedules.c.project_id
            )
        )
        .where(in_projects(schedules.c.project_id, project_ids))
        .order_by(schedule_missed.c.id.desc())
        .limit(limit)
    )
    return [MissedTimes(**row._mapping) for row in conn.execute(query)]


@dataclass(frozen=True)
class GridTask:
    """One task of an attempt as the grid draws it."""

    id: int
    attempt_id: int
    parent_id: int | None
    full_name: str
    position: int
    is_group: bool
    state: str


def grid_tasks(conn: Connection, attempt_ids: Collection[int]) -> list[GridTask]:
    """The tasks of the given attempts (one query), in creation order."""
    if not attempt_ids:
        return []
    query = (
        select(
            tasks.c.id,
            tasks.c.attempt_id,
            tasks.c.parent_id,
            tasks.c.full_name,
            tasks.c.position,
            tasks.c.is_group,
            tasks.c.state,
        )
        .where(tasks.c.attempt_id.in_(sorted(attempt_ids)))
        .order_by(tasks.c.id)
    )
    return [GridTask(**row._mapping) for row in conn.execute(query)]


def count_workflows(conn: Connection, revision_ids: Collection[int]) -> dict[int, int]:
    """How many workflows each revision defines, by revision id."""
    if not revision_ids:
        return {}
    query = (
        select(workflow_definitions.c.revision_id, func.count())
        .where(workflow_definitions.c.revision_id.in_(sorted(revision_ids)))
        .group_by(workflow_definitions.c.revision_id)
    )
    return {int(row[0]): int(row[1]) for row in conn.execute(query)}
