"""Schedules: their rows, activation history, missed times, and bulk session emission.

A schedule's ``last_session_time`` is its checkpoint: every session time up to it has been
emitted or recorded as missed. ``next_run_time`` says when a scheduler should look at it
again; any change made here sets it to now so that the next scheduler pass re-plans.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from functools import cached_property, lru_cache
from typing import Any

from sqlalchemy import Connection, Text, and_, bindparam, cast, func, literal, select
from sqlalchemy.dialects import postgresql

from shared.domain.catchup import MissedRange, Span
from shared.domain.schedule import ScheduleSpec
from shared.domain.states import AttemptState
from shared.domain.workflow import WorkflowDefinition
from shared.errors import Conflict, NotFound
from shared.store.sql import column_types, in_ids, insert_rows, rows_select
from shared.store.tables import (
    attempts,
    backfills,
    projects,
    schedule_inactive_spans,
    schedule_missed,
    schedules,
    sessions,
)

ACTIVE = (AttemptState.CREATED.value, AttemptState.RUNNING.value)
SCHEDULED_ATTEMPT = "scheduled"
_EPSILON = timedelta(microseconds=1)


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


def _columns(source: Any, spec: Any = None) -> tuple[Any, ...]:
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


_COLUMNS = _columns(schedules)
# Rows are built by position: the columns name ScheduleRow's fields, in order.
assert [c.name for c in _COLUMNS] == [f.name for f in fields(ScheduleRow)]
_SPEC_INDEX = [f.name for f in fields(ScheduleRow)].index("spec")


def _rows(conn: Connection, query: Any) -> list[ScheduleRow]:
    return [ScheduleRow(*row) for row in conn.execute(query).all()]


def _select() -> Any:
    return select(*_COLUMNS).select_from(schedules.join(projects))


def database_now(conn: Connection) -> datetime | None:
    """The database server's clock (PostgreSQL), so every replica agrees on what is due."""
    if conn.dialect.name != "postgresql":
        return None
    found: datetime = conn.execute(select(func.statement_timestamp())).scalar_one()
    return found


def list_schedules(
    conn: Connection, *, project_id: int | None = None, include_removed: bool = False
) -> list[ScheduleRow]:
    """Schedules ordered by project and workflow name."""
    query = _select().order_by(projects.c.name, schedules.c.workflow_name)
    if project_id is not None:
        query = query.where(schedules.c.project_id == project_id)
    if not include_removed:
        query = query.where(schedules.c.disabled_at.is_(None))
    return _rows(conn, query)


def get_schedule(conn: Connection, schedule_id: int) -> ScheduleRow:
    """One schedule; NotFound if there is none."""
    found = _rows(conn, _select().where(schedules.c.id == schedule_id))
    if not found:
        raise NotFound(f"schedule {schedule_id} does not exist")
    return found[0]


def find_schedule(conn: Connection, project: str, workflow: str) -> ScheduleRow:
    """The schedule of ``project``'s ``workflow``; NotFound naming what is missing."""
    query = _select().where(projects.c.name == project, schedules.c.workflow_name == workflow)
    found = _rows(conn, query)
    if not found:
        raise NotFound(f"project '{project}' has no schedule for workflow '{workflow}'")
    return found[0]


def claim_due(conn: Connection, now: datetime, limit: int) -> list[ScheduleRow]:
    """Due schedules, oldest first, locked for this transaction (skipping others' locks)."""
    if conn.dialect.name != "postgresql":
        query = (
            _select()
            .where(schedules.c.next_run_time <= now)
            .order_by(schedules.c.next_run_time, schedules.c.id)
            .limit(limit)
        )
        return _rows(conn, query)
    # Lock first, join projects after: sorting the due schedules (all of them, when
    # thousands share one minute) then costs a third. The locked rows' own (latest)
    # versions are what the outer query reads.
    claimed = (
        select(schedules)
        .where(schedules.c.next_run_time <= now)
        .order_by(schedules.c.next_run_time, schedules.c.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
        .cte("claimed")
    )
    query = (
        select(*_columns(claimed, spec=cast(claimed.c.spec, Text)))
        .select_from(claimed.join(projects, projects.c.id == claimed.c.project_id))
        .order_by(claimed.c.next_run_time, claimed.c.id)
    )
    # The spec comes as text, decoded once per distinct text: at a busy minute thousands
    # of claimed schedules share a handful of specs.
    claimed_rows = []
    for row in conn.execute(query).all():
        values = list(row)
        values[_SPEC_INDEX] = dict(_decoded_spec(values[_SPEC_INDEX]))
        claimed_rows.append(ScheduleRow(*values))
    return claimed_rows


@lru_cache(maxsize=4096)
def _decoded_spec(text: str) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(text)
    return decoded  # callers copy it: a row's spec is its own


def count_due(conn: Connection, now: datetime) -> int:
    """How many schedules are due at ``now``."""
    query = select(func.count()).where(schedules.c.next_run_time <= now)
    return int(conn.execute(query).scalar_one())


def earliest_due(conn: Connection) -> datetime | None:
    """The soonest ``next_run_time`` of any schedule."""
    found: datetime | None = conn.execute(select(func.min(schedules.c.next_run_time))).scalar()
    return found


def inactive_spans(conn: Connection, schedule_ids: Collection[int]) -> dict[int, list[Span]]:
    """Closed inactive spans of each schedule."""
    spans: dict[int, list[Span]] = {}
    if not schedule_ids:
        return spans
    query = select(
        schedule_inactive_spans.c.schedule_id,
        schedule_inactive_spans.c.started_at,
        schedule_inactive_spans.c.ended_at,
    ).where(in_ids(conn, schedule_inactive_spans.c.schedule_id, schedule_ids))
    for row in conn.execute(query):
        spans.setdefault(row.schedule_id, []).append(Span(row.started_at, row.ended_at))
    return spans


def active_counts(conn: Connection, schedule_ids: Collection[int]) -> dict[int, tuple[int, int]]:
    """(running or about to run, waiting) attempts of each schedule's sessions."""
    counts: dict[int, tuple[int, int]] = {}
    if not schedule_ids:
        return counts
    query = (
        select(sessions.c.schedule_id, attempts.c.state, func.count())
        .select_from(attempts.join(sessions))
        .where(
            attempts.c.state.in_([*ACTIVE, AttemptState.WAITING.value]),
            in_ids(conn, sessions.c.schedule_id, schedule_ids),
        )
        .group_by(sessions.c.schedule_id, attempts.c.state)
    )
    for schedule_id, state, count in conn.execute(query):
        active, waiting = counts.get(schedule_id, (0, 0))
        if state == AttemptState.WAITING.value:
            counts[schedule_id] = (active, waiting + count)
        else:
            counts[schedule_id] = (active + count, waiting)
    return counts


@dataclass(frozen=True)
class NewSession:
    """A session to emit and the state of its first attempt (created or waiting)."""

    schedule_id: int | None
    project_id: int
    workflow_name: str
    session_time: datetime
    workflow_definition_id: int
    timezone: str
    project_dir: str | None
    state: AttemptState
    backfill_id: int | None = None


def insert_sessions(conn: Connection, new: Sequence[NewSession], now: datetime) -> list[int]:
    """Insert sessions with their first attempt; existing sessions are left alone.

    Returns the ids of the attempts created: one per session that did not exist yet.
    """
    if not new:
        return []
    if conn.dialect.name == "postgresql":
        return _insert_sessions_at_once(conn, new, now)
    session_rows = [
        {
            "project_id": item.project_id,
            "workflow_name": item.workflow_name,
            "session_time": item.session_time,
            "session_uuid": str(uuid.uuid4()),
            "schedule_id": item.schedule_id,
            "created_at": now,
        }
        for item in new
    ]
    by_key = {(i.project_id, i.workflow_name, i.session_time): i for i in new}
    returned = (
        sessions.c.id,
        sessions.c.project_id,
        sessions.c.workflow_name,
        sessions.c.session_time,
    )
    created = insert_rows(conn, sessions, session_rows, returned, ignore_conflicts=True)
    if not created:
        return []
    attempt_rows = []
    for session_id, project_id, workflow_name, session_time in created:
        item = by_key[(project_id, workflow_name, session_time)]
        name = SCHEDULED_ATTEMPT if item.backfill_id is None else f"backfill-{item.backfill_id}"
        attempt_rows.append(
            {
                "session_id": session_id,
                "name": name,
                "workflow_definition_id": item.workflow_definition_id,
                "state": item.state.value,
                "timezone": item.timezone,
                "params": {},
                "project_dir": item.project_dir,
                "backfill_id": item.backfill_id,
                "created_at": now,
            }
        )
    return [int(row.id) for row in insert_rows(conn, attempts, attempt_rows, (attempts.c.id,))]


_SESSION_COLUMNS = ("project_id", "workflow_name", "session_time", "session_uuid", "schedule_id")
_ATTEMPT_COLUMNS = (
    "name",
    "workflow_definition_id",
    "state",
    "timezone",
    "project_dir",
    "backfill_id",
)


def _insert_sessions_at_once(
    conn: Connection, new: Sequence[NewSession], now: datetime
) -> list[int]:
    """PostgreSQL: :func:`insert_sessions` in one statement, sessions and attempts together.

    ``WITH new AS (unnest ...), inserted AS (INSERT INTO sessions ... ON CONFLICT DO
    NOTHING RETURNING ...) INSERT INTO attempts SELECT ... FROM inserted JOIN new``: the
    sessions created never travel back to be turned into attempts.
    """
    by_key = {(i.project_id, i.workflow_name, i.session_time): i for i in new}
    rows = [
        {
            "project_id": item.project_id,
            "workflow_name": item.workflow_name,
            "session_time": item.session_time,
            "session_uuid": str(uuid.uuid4()),
            "schedule_id": item.schedule_id,
            "name": (
                SCHEDULED_ATTEMPT if item.backfill_id is None else f"backfill-{item.backfill_id}"
            ),
            "workflow_definition_id": item.workflow_definition_id,
            "state": item.state.value,
            "timezone": item.timezone,
            "project_dir": item.project_dir,
            "backfill_id": item.backfill_id,
        }
        for item in by_key.values()  # one per session, as the unique key allows
    ]
    wanted = rows_select(rows, column_types(sessions, attempts)).cte("new_sessions")
    created_at = literal(now, sessions.c.created_at.type)
    inserted = (
        postgresql.insert(sessions)
        .from_select(
            [*_SESSION_COLUMNS, "created_at"],
            select(*(wanted.c[name] for name in _SESSION_COLUMNS), created_at),
        )
        .on_conflict_do_nothing()
        .returning(
            *(sessions.c[name] for name in ("id", "project_id", "workflow_name", "session_time"))
        )
        .cte("inserted")
    )
    matching = and_(
        inserted.c.project_id == wanted.c.project_id,
        inserted.c.workflow_name == wanted.c.workflow_name,
        inserted.c.session_time == wanted.c.session_time,
    )
    attempt_rows = select(
        inserted.c.id,
        *(wanted.c[name] for name in _ATTEMPT_COLUMNS),
        literal({}, attempts.c.params.type),
        created_at,
    ).select_from(inserted.join(wanted, matching))
    statement = (
        attempts.insert()
        .from_select(["session_id", *_ATTEMPT_COLUMNS, "params", "created_at"], attempt_rows)
        .returning(attempts.c.id)
    )
    return [int(attempt_id) for attempt_id in conn.execute(statement).scalars()]


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
    reason: str
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
    return [MissedRow(**row._mapping) for row in conn.execute(query)]


@dataclass(frozen=True)
class Progress:
    """Where a schedule stands after a pass."""

    schedule_id: int
    checkpoint: datetime | None
    next_session_time: datetime | None
    next_run_time: datetime | None


def save_progress(conn: Connection, progress: Sequence[Progress], now: datetime) -> None:
    """Advance checkpoints and due times of many schedules at once; clears failures."""
    if not progress:
        return
    rows = [
        {
            "id": item.schedule_id,
            "last_session_time": item.checkpoint,
            "next_schedule_time": item.next_session_time,
            "next_run_time": item.next_run_time,
        }
        for item in progress
    ]
    if conn.dialect.name == "postgresql":
        # One UPDATE ... FROM unnest(...) instead of one UPDATE per schedule.
        source = rows_select(rows, column_types(schedules)).subquery()
        conn.execute(
            schedules.update()
            .where(schedules.c.id == source.c.id)
            .values(
                last_session_time=source.c.last_session_time,
                next_schedule_time=source.c.next_schedule_time,
                next_run_time=source.c.next_run_time,
                failures=0,
                last_error=None,
            )
        )
        return
    statement = (
        schedules.update()
        .where(schedules.c.id == bindparam("b_id"))
        .values(
            last_session_time=bindparam("b_last_session_time"),
            next_schedule_time=bindparam("b_next_schedule_time"),
            next_run_time=bindparam("b_next_run_time"),
            failures=0,
            last_error=None,
        )
    )
    conn.execute(statement, [{f"b_{key}": value for key, value in row.items()} for row in rows])


def record_failure(
    conn: Connection, schedule_id: int, error: str, now: datetime, *, max_backoff_seconds: float
) -> int:
    """Count a failed pass and look again after an exponential backoff; the failure count.

    The checkpoint does not move, so the retry emits the same times, in order.
    """
    query = select(schedules.c.failures).where(schedules.c.id == schedule_id)
    failures = int(conn.execute(query).scalar_one()) + 1
    retry_at = now + timedelta(seconds=min(2.0**failures, max_backoff_seconds))
    conn.execute(
        schedules.update()
        .where(schedules.c.id == schedule_id)
        .values(failures=failures, last_error=error[:2000], next_run_time=retry_at)
    )
    return failures


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
        start = now if schedule_from is None else schedule_from - _EPSILON
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
        _close_span(conn, existing.id, existing.disabled_at, now, "removed")
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
        count = old.count_between(first, last, 100_000)
        record_missed(conn, existing.id, [MissedRange(first, last, count, "edited")], now)


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
    conn: Connection, schedule_id: int, started_at: datetime, ended_at: datetime, reason: str
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
        _close_span(conn, schedule_id, row.paused_at, now, "paused")
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
    them. Returns the skipped session times (at most 10,000).
    """
    row = get_schedule(conn, schedule_id)
    spec = row.schedule
    checkpoint = row.last_session_time or now
    skipped: list[datetime] = []
    current = checkpoint
    while len(skipped) < 10_000:
        following = spec.next_session_time(current)
        if following is None or (to is not None and following >= to):
            break
        if count is not None and len(skipped) >= count:
            break
        skipped.append(following)
        current = following
    if skipped:
        missed = MissedRange(skipped[0], skipped[-1], len(skipped), "skipped")
        record_missed(conn, schedule_id, [missed], now)
        conn.execute(
            schedules.update()
            .where(schedules.c.id == schedule_id)
            .values(last_session_time=skipped[-1], next_run_time=now, updated_at=now)
        )
    return skipped


@dataclass(frozen=True)
class Waiting:
    """A waiting attempt and what holds it."""

    attempt_id: int
    schedule_id: int | None
    backfill_id: int | None


def waiting_attempts(conn: Connection, limit: int) -> list[Waiting]:
    """Waiting attempts in session-time order."""
    query = (
        select(attempts.c.id, sessions.c.schedule_id, attempts.c.backfill_id)
        .select_from(attempts.join(sessions))
        .where(attempts.c.state == AttemptState.WAITING.value)
        .order_by(sessions.c.session_time, attempts.c.id)
        .limit(limit)
    )
    return [Waiting(int(a), s, b) for a, s, b in conn.execute(query)]


def lock_rows(conn: Connection, table: Any, ids: Collection[int]) -> set[int]:
    """Lock rows of ``table`` for this transaction; the ids another transaction holds are left."""
    if not ids:
        return set()
    query = select(table.c.id).where(table.c.id.in_(list(ids)))
    if conn.dialect.name == "postgresql":
        query = query.with_for_update(skip_locked=True)
    return {int(found) for found in conn.execute(query).scalars()}


def backfill_active_counts(conn: Connection, backfill_ids: Collection[int]) -> dict[int, int]:
    """Created or running attempts of each backfill."""
    if not backfill_ids:
        return {}
    query = (
        select(attempts.c.backfill_id, func.count())
        .where(attempts.c.backfill_id.in_(list(backfill_ids)), attempts.c.state.in_(ACTIVE))
        .group_by(attempts.c.backfill_id)
    )
    return {int(b): int(n) for b, n in conn.execute(query)}


def backfill_parallel(conn: Connection, backfill_ids: Collection[int]) -> dict[int, bool]:
    """Whether each backfill may run its sessions side by side."""
    query = select(backfills.c.id, backfills.c.parallel).where(
        backfills.c.id.in_(list(backfill_ids))
    )
    return {int(b): bool(p) for b, p in conn.execute(query)}


def start_waiting(conn: Connection, attempt_ids: Collection[int]) -> int:
    """Move waiting attempts to ``created`` so an executor picks them up."""
    if not attempt_ids:
        return 0
    result = conn.execute(
        attempts.update()
        .where(attempts.c.id.in_(list(attempt_ids)), attempts.c.state == AttemptState.WAITING.value)
        .values(state=AttemptState.CREATED.value)
    )
    return int(result.rowcount)


@dataclass(frozen=True)
class BackfillPlan:
    """What a backfill creates: new session times, and those that exist already."""

    backfill_id: int | None
    created: list[datetime]
    existing: list[datetime]


MAX_BACKFILL = 100_000


def backfill(
    conn: Connection,
    row: ScheduleRow,
    first: datetime,
    last: datetime,
    now: datetime,
    *,
    parallel: bool = False,
    dry_run: bool = False,
) -> BackfillPlan:
    """Sessions for every scheduled time in ``[first, last]``; existing sessions are kept.

    The sessions run one after another (oldest first) unless ``parallel``.
    """
    if last < first:
        raise Conflict("the backfill range ends before it starts")
    spec = row.schedule
    times: list[datetime] = []
    current = first - _EPSILON
    while len(times) <= MAX_BACKFILL:
        following = spec.next_session_time(current)
        if following is None or following > last:
            break
        times.append(following)
        current = following
    if len(times) > MAX_BACKFILL:
        raise Conflict(f"the backfill range holds more than {MAX_BACKFILL} session times")
    existing = _existing_session_times(conn, row, first, last)
    wanted = [t for t in times if t not in existing]
    if dry_run or not wanted:
        return BackfillPlan(None, wanted, sorted(existing))
    backfill_id = conn.execute(
        backfills.insert()
        .values(
            project_id=row.project_id,
            workflow_name=row.workflow_name,
            first_session_time=first,
            last_session_time=last,
            parallel=parallel,
            created_at=now,
        )
        .returning(backfills.c.id)
    ).scalar_one()
    insert_sessions(
        conn,
        [
            NewSession(
                row.id,
                row.project_id,
                row.workflow_name,
                session_time,
                row.workflow_definition_id,
                row.timezone,
                row.project_dir,
                AttemptState.WAITING,
                int(backfill_id),
            )
            for session_time in wanted
        ],
        now,
    )
    return BackfillPlan(int(backfill_id), wanted, sorted(existing))


def _existing_session_times(
    conn: Connection, row: ScheduleRow, first: datetime, last: datetime
) -> set[datetime]:
    query = select(sessions.c.session_time).where(
        and_(
            sessions.c.project_id == row.project_id,
            sessions.c.workflow_name == row.workflow_name,
            sessions.c.session_time >= first,
            sessions.c.session_time <= last,
        )
    )
    return set(conn.execute(query).scalars())
