"""Schedules: list, show, and the controls: pause, resume, skip, backfill.

The reads are those of shared/store/schedule_reads.py (the web UI renders the same
records); the operations are those of ``tickwork schedules`` and ``tickwork backfill``, on
the same store functions.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from apiflask import APIBlueprint
from pydantic import BaseModel, Field
from pydantic.config import JsonDict
from sqlalchemy import Connection

from tickwork.services.api.database import read_connection, write_transaction
from tickwork.services.api.errors import InvalidBody
from tickwork.services.api.models import RequestBody
from tickwork.services.api.paging import PageQuery, cursor_after, next_cursor, page_limit
from tickwork.services.api.routes.workflows import LastSessionOut
from tickwork.services.api.scope import visible_ids
from tickwork.services.api.times import format_time, parse_time
from tickwork.shared.clock import utc_now
from tickwork.shared.domain.states import ScheduleState
from tickwork.shared.errors import Conflict
from tickwork.shared.store import emission as emission_store
from tickwork.shared.store import schedule_reads
from tickwork.shared.store import schedules as schedule_store
from tickwork.shared.store.schedule_reads import (
    ScheduleFilters,
    detail_json,
    schedule_json,
    summary_json,
)
from tickwork.shared.store.schedules import ScheduleRow

blueprint = APIBlueprint("schedules", __name__, url_prefix="/api/schedules", tag="Schedules")

RECENT_MISSED = schedule_reads.RECENT_MISSED
MAX_SKIP = schedule_store.MAX_SKIP
MAX_BACKFILL = emission_store.MAX_BACKFILL
TIME_FIELD: JsonDict = {"format": "date-time"}


class ResumeIn(RequestBody):
    """Resume a paused schedule."""

    replay: bool = Field(False, description="Also run the session times due while paused.")


class SkipIn(RequestBody):
    """Skip upcoming session times: those before ``to``, or the next ``count``."""

    to: str | None = Field(None, max_length=64, json_schema_extra=TIME_FIELD)
    count: int | None = Field(None, ge=1, le=MAX_SKIP)


class BackfillIn(RequestBody):
    """Sessions for past session times from ``from`` to ``to`` (or ``count`` of them)."""

    first: str = Field(alias="from", max_length=64, json_schema_extra=TIME_FIELD)
    to: str | None = Field(None, max_length=64, json_schema_extra=TIME_FIELD)
    count: int | None = Field(None, ge=1, le=MAX_BACKFILL)
    parallel: bool = Field(False, description="Let the sessions run side by side.")
    dry_run: bool = Field(False, description="Only answer which sessions would be created.")


class MissedOut(BaseModel):
    """Session times a schedule did not emit, and why."""

    first_session_time: str
    last_session_time: str
    count: int | None
    reason: str
    recorded_at: str


class ScheduleOut(BaseModel):
    """A schedule; session times are in its time zone."""

    id: str
    project: str
    project_id: str
    workflow: str
    workflow_definition_id: str
    schedule: str
    spec: dict[str, Any]
    timezone: str
    state: ScheduleState = Field(
        description="active, paused, failing (its last scheduler passes failed) or removed."
    )
    next_run_time: str | None
    next_session_time: str | None
    checkpoint: str | None
    paused: bool
    paused_at: str | None
    disabled: bool
    disabled_at: str | None
    failures: int
    last_error: str | None


class ScheduleItem(ScheduleOut):
    """A listed schedule: a schedule and its workflow's last session (null if none)."""

    last_session: LastSessionOut | None


class NextTimeOut(BaseModel):
    """An upcoming session time and when it is due to run."""

    session_time: str
    run_time: str


class ScheduleDetail(ScheduleItem):
    """A schedule with its next session times and recent missed times (newest first)."""

    next_times: list[NextTimeOut]
    missed: list[MissedOut]


class ScheduleList(BaseModel):
    """A page of schedules, newest first."""

    items: list[ScheduleItem]
    next_cursor: str | None


class ScheduleQuery(PageQuery):
    """Filters of the schedule list."""

    project: str | None = Field(None, max_length=255)
    workflow: str | None = Field(None, max_length=255)
    q: str | None = Field(
        None,
        max_length=255,
        description="Only schedules whose project or workflow name holds this text, in any case.",
    )
    paused: bool | None = Field(None, description="Only paused (true) or unpaused (false).")
    include_removed: bool = Field(False, description="Also schedules of removed workflows.")

    def filters(self) -> ScheduleFilters:
        """The store's filters (only the projects the request's token covers)."""
        return ScheduleFilters(
            project=self.project,
            workflow=self.workflow,
            q=self.q or None,
            paused=self.paused,
            include_removed=self.include_removed,
            project_ids=visible_ids(),
        )


class Skipped(BaseModel):
    """What a skip did."""

    skipped: int
    first_session_time: str | None
    last_session_time: str | None
    schedule: ScheduleOut


class BackfillOut(BaseModel):
    """The sessions a backfill created (or would create), and those that existed."""

    backfill_id: str | None
    dry_run: bool
    parallel: bool
    created: list[str]
    existing: list[str]


def _detail(conn: Connection, schedule_id: int) -> dict[str, Any]:
    return detail_json(schedule_reads.get_schedule_detail(conn, schedule_id))


@blueprint.get("")
@blueprint.input(ScheduleQuery, location="query", arg_name="query")
@blueprint.output(ScheduleList)
def list_schedules(query: ScheduleQuery) -> dict[str, Any]:
    """Schedules, newest first, each with its workflow's last session (``project``,
    ``workflow``: only theirs; ``q``: those whose project or workflow name holds it;
    ``paused``: only paused or unpaused ones)."""
    with read_connection() as conn:
        page = schedule_reads.list_schedule_page(
            conn, query.filters(), after=cursor_after(query), limit=page_limit(query)
        )
    return {
        "items": [summary_json(item) for item in page.items],
        "next_cursor": next_cursor(page.next_after),
    }


@blueprint.get("/<id:schedule_id>")
@blueprint.output(ScheduleDetail)
def get_schedule(schedule_id: int) -> dict[str, Any]:
    """One schedule: next run and session time, checkpoint, state, recent missed times."""
    with read_connection() as conn:
        return _detail(conn, schedule_id)


@blueprint.post("/<id:schedule_id>/pause")
@blueprint.output(ScheduleDetail)
def pause_schedule(schedule_id: int) -> dict[str, Any]:
    """Pause: session times due from now on do not run (pausing twice changes nothing)."""
    with write_transaction() as conn:
        schedule_store.get_schedule(conn, schedule_id)
        schedule_store.pause_schedule(conn, schedule_id, utc_now())
        return _detail(conn, schedule_id)


@blueprint.post("/<id:schedule_id>/resume")
@blueprint.input(ResumeIn, location="json", arg_name="body")
@blueprint.output(ScheduleDetail)
def resume_schedule(schedule_id: int, body: ResumeIn) -> dict[str, Any]:
    """Resume; with ``replay`` the times due while paused run too (else they are skipped)."""
    with write_transaction() as conn:
        schedule_store.resume_schedule(conn, schedule_id, utc_now(), replay=body.replay)
        return _detail(conn, schedule_id)


@blueprint.post("/<id:schedule_id>/skip")
@blueprint.input(SkipIn, location="json", arg_name="body")
@blueprint.output(Skipped)
def skip_schedule(schedule_id: int, body: SkipIn) -> dict[str, Any]:
    """Skip upcoming session times; they are recorded as missed (a backfill can run them)."""
    with write_transaction() as conn:
        row, skipped = skip_session_times(conn, schedule_id, body, utc_now())
        detail = schedule_json(schedule_store.get_schedule(conn, schedule_id))
    return {
        "skipped": len(skipped),
        "first_session_time": format_time(skipped[0], row.timezone) if skipped else None,
        "last_session_time": format_time(skipped[-1], row.timezone) if skipped else None,
        "schedule": detail,
    }


def skip_session_times(
    conn: Connection, schedule_id: int, body: SkipIn, now: datetime
) -> tuple[ScheduleRow, list[datetime]]:
    """Skip what ``body`` asks: the schedule as it was, and the session times skipped.

    Raises InvalidBody naming the member that cannot be used (``/to``, or none when both
    or neither of ``to`` and ``count`` are given).
    """
    if (body.to is None) == (body.count is None):
        raise InvalidBody("", "give either 'to' or 'count'")
    row = schedule_store.get_schedule(conn, schedule_id)
    to = None if body.to is None else parse_time(body.to, row.timezone, pointer="/to")
    try:
        skipped = schedule_store.skip_schedule(conn, schedule_id, now, to=to, count=body.count)
    except Conflict as exc:  # more session times before 'to' than one skip passes
        raise InvalidBody("/to", str(exc)) from None
    return row, skipped


@blueprint.post("/<id:schedule_id>/backfill")
@blueprint.input(BackfillIn, location="json", arg_name="body")
@blueprint.output(BackfillOut, status_code=201, description="Sessions were created")
@blueprint.doc(responses={200: "Nothing was created (a dry run, or every session existed)"})
def backfill_schedule(schedule_id: int, body: BackfillIn) -> tuple[dict[str, Any], int]:
    """Sessions for the past session times in a range; existing sessions are kept.

    They run one after another, oldest first, unless ``parallel``.
    """
    with write_transaction() as conn:
        row, plan = plan_backfill(conn, schedule_id, body, utc_now())
    zone = row.timezone
    answer = {
        "backfill_id": None if plan.backfill_id is None else str(plan.backfill_id),
        "dry_run": body.dry_run,
        "parallel": body.parallel,
        "created": [format_time(t, zone) for t in plan.created],
        "existing": [format_time(t, zone) for t in plan.existing],
    }
    return answer, 201 if plan.backfill_id is not None else 200


def plan_backfill(
    conn: Connection, schedule_id: int, body: BackfillIn, now: datetime
) -> tuple[ScheduleRow, emission_store.BackfillPlan]:
    """Run (or with ``dry_run`` only plan) the backfill ``body`` asks of a schedule: the
    schedule, and the sessions created (or that would be) and those that existed.

    Raises InvalidBody naming the member that cannot be used.
    """
    if (body.to is None) == (body.count is None):
        raise InvalidBody("", "give either 'to' or 'count' with 'from'")
    row = schedule_store.get_schedule(conn, schedule_id)
    first, last, times = _backfill_range(row, body, now)
    plan = emission_store.backfill(
        conn, row, first, last, now, parallel=body.parallel, dry_run=body.dry_run, times=times
    )
    return row, plan


def _backfill_range(
    row: ScheduleRow, body: BackfillIn, now: datetime
) -> tuple[datetime, datetime, list[datetime]]:
    """The first and last session time of a backfill (both past), and its session times,
    computed once and at most MAX_BACKFILL of them."""
    first = parse_time(body.first, row.timezone, pointer="/from")
    if first > now:
        raise InvalidBody("/from", "must not be in the future: a backfill runs past times")
    if body.to is not None:
        last = parse_time(body.to, row.timezone, pointer="/to")
        if last < first:
            raise InvalidBody("/to", "must not be before 'from'")
        if last > now:
            raise InvalidBody("/to", "must not be in the future: a backfill runs past times")
        try:
            return first, last, emission_store.backfill_times(row.schedule, first, last)
        except Conflict as exc:  # a range of more session times than one backfill makes
            raise InvalidBody("/to", str(exc)) from None
    assert body.count is not None  # the model takes exactly one of `to` and `count`
    times = row.schedule.session_times(first - schedule_store.EPSILON, body.count)
    if not times:
        raise InvalidBody("/from", "the schedule has no session time from then on")
    if times[-1] > now:
        raise InvalidBody("/count", f"{body.count} session times from 'from' reach the future")
    return first, times[-1], times
