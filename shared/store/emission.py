"""What a scheduler pass reads and writes: due schedules, sessions in bulk, checkpoints.

Also the waiting attempts that a schedule's overlap policy or a serial backfill holds
back, and backfills themselves. Every statement here is one per batch, not one per
schedule: a busy minute brings thousands of schedules at once.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

from sqlalchemy import Connection, Select, Text, and_, cast, func, literal, select

from tickwork.shared.domain.catchup import Span
from tickwork.shared.domain.schedule import ScheduleSpec
from tickwork.shared.domain.states import AttemptState
from tickwork.shared.errors import Conflict
from tickwork.shared.store.dialects import dialect_of
from tickwork.shared.store.schedules import (
    EPSILON,
    ScheduleRow,
    schedule_columns,
)
from tickwork.shared.store.sql import column_types, in_ids, insert_rows, rows_select, update_rows
from tickwork.shared.store.tables import (
    attempts,
    backfills,
    projects,
    schedule_inactive_spans,
    schedules,
    sessions,
)

ACTIVE = (AttemptState.CREATED.value, AttemptState.RUNNING.value)
SCHEDULED_ATTEMPT = "scheduled"


def database_now(conn: Connection) -> datetime | None:
    """The database server's clock (PostgreSQL), so every replica agrees on what is due."""
    return dialect_of(conn).database_now(conn)


@dataclass(frozen=True)
class DueSchedule:
    """A due schedule as a pass lists it: its id and the checkpoint it had then."""

    schedule_id: int
    checkpoint: datetime | None


def list_due(conn: Connection, now: datetime, limit: int) -> list[DueSchedule]:
    """Up to ``limit`` due schedules, oldest first, unlocked: what a pass will claim.

    A pass reads this once and claims its batches by id (:func:`claim_listed`): a batch
    then costs a lookup per schedule, where claiming from the due-time index would
    step again over the entries of every schedule the pass has already advanced.
    """
    query = (
        select(schedules.c.id, schedules.c.last_session_time)
        .where(schedules.c.next_run_time <= now)
        .order_by(schedules.c.next_run_time, schedules.c.id)
        .limit(limit)
    )
    return [DueSchedule(int(id_), checkpoint) for id_, checkpoint in conn.execute(query).all()]


def claim_listed(
    conn: Connection, schedule_ids: Collection[int], now: datetime
) -> list[ScheduleRow]:
    """Those of ``schedule_ids`` still due at ``now``, oldest first, locked for this
    transaction; schedules another transaction holds are skipped."""
    if not schedule_ids:
        return []
    due = select(schedules).where(
        in_ids(conn, schedules.c.id, schedule_ids), schedules.c.next_run_time <= now
    )
    return _claimed_rows(conn, due)


def _claimed_rows(conn: Connection, due: Select[Any]) -> list[ScheduleRow]:
    """The rows of ``due`` locked (skipping others' locks), with their projects, oldest first."""
    # Lock first, join projects after: sorting the due schedules (all of them, when
    # thousands share one minute) then costs a third. The locked rows' own (latest)
    # versions are what the outer query reads.
    claimed = dialect_of(conn).skip_locked(due).cte("claimed")
    query = (
        select(*schedule_columns(claimed, spec=cast(claimed.c.spec, Text)))
        .select_from(claimed.join(projects, projects.c.id == claimed.c.project_id))
        .order_by(claimed.c.next_run_time, claimed.c.id)
    )
    # The spec comes as text, decoded and parsed once per distinct text: at a busy
    # minute thousands of claimed schedules share a handful of specs.
    rows = []
    for values in conn.execute(query).all():  # all(): fetched at once, not row by row
        fields = dict(zip(_ROW_FIELDS, values, strict=True))
        text = fields["spec"]
        row = ScheduleRow(**{**fields, "spec": dict(_decoded_spec(text))})
        row.__dict__["schedule"] = _parsed_spec(text)  # its cached property, filled in
        rows.append(row)
    return rows


_ROW_FIELDS = tuple(field.name for field in dataclass_fields(ScheduleRow))


@lru_cache(maxsize=4096)
def _decoded_spec(text: str) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(text)
    return decoded  # callers copy it: a row's spec is its own


@lru_cache(maxsize=4096)
def _parsed_spec(text: str) -> ScheduleSpec:
    return ScheduleSpec.from_config(_decoded_spec(text))  # immutable: shared by its rows


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
        spans.setdefault(row.schedule_id, []).append(Span(start=row.started_at, end=row.ended_at))
    return spans


def active_counts(
    conn: Connection, schedule_ids: Collection[int] | None = None
) -> dict[int, tuple[int, int]]:
    """(running or about to run, waiting) attempts of each schedule's sessions; of every
    schedule that has any when ``schedule_ids`` is None.

    Attempts do not name their schedule, so this reads every running and waiting attempt
    and its session, whatever ids are asked for. Naming the ids in the query would let
    PostgreSQL, without statistics on a new backlog, join the two sides by rescanning
    one for each row of the other: seconds for a few thousand waiting attempts.
    """
    if schedule_ids is not None and not schedule_ids:
        return {}
    query = (
        select(sessions.c.schedule_id, attempts.c.state, func.count().label("attempt_count"))
        .select_from(attempts.join(sessions))
        .where(
            attempts.c.state.in_([*ACTIVE, AttemptState.WAITING.value]),
            sessions.c.schedule_id.is_not(None),
        )
        .group_by(sessions.c.schedule_id, attempts.c.state)
    )
    wanted = None if schedule_ids is None else set(schedule_ids)
    counts: dict[int, tuple[int, int]] = {}
    for schedule_id, state, count in conn.execute(query).all():
        if wanted is not None and schedule_id not in wanted:
            continue
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

    @classmethod
    def of(
        cls,
        row: ScheduleRow,
        session_time: datetime,
        state: AttemptState,
        backfill_id: int | None = None,
    ) -> NewSession:
        """A session of the schedule ``row`` at ``session_time``."""
        return cls(
            schedule_id=row.id,
            project_id=row.project_id,
            workflow_name=row.workflow_name,
            session_time=session_time,
            workflow_definition_id=row.workflow_definition_id,
            timezone=row.timezone,
            project_dir=row.project_dir,
            state=state,
            backfill_id=backfill_id,
        )

    @property
    def key(self) -> tuple[int, str, datetime]:
        """The session's idempotency key: project, workflow and session time."""
        return (self.project_id, self.workflow_name, self.session_time)

    def key_values(self) -> dict[str, Any]:
        """The ``sessions`` columns of this session but its UUID (:data:`_KEY_COLUMNS`)."""
        return {
            "project_id": self.project_id,
            "workflow_name": self.workflow_name,
            "session_time": self.session_time,
            "schedule_id": self.schedule_id,
        }

    def session_values(self) -> dict[str, Any]:
        """The ``sessions`` columns of this session, with a new UUID."""
        return {**self.key_values(), "session_uuid": str(uuid.uuid4())}

    def attempt_values(self) -> dict[str, Any]:
        """The ``attempts`` columns of its first attempt (all of :data:`_ATTEMPT_COLUMNS`)."""
        name = SCHEDULED_ATTEMPT if self.backfill_id is None else f"backfill-{self.backfill_id}"
        return {
            "name": name,
            "workflow_definition_id": self.workflow_definition_id,
            "state": self.state.value,
            "timezone": self.timezone,
            "project_dir": self.project_dir,
            "backfill_id": self.backfill_id,
        }


def insert_sessions(conn: Connection, new: Sequence[NewSession], now: datetime) -> list[int]:
    """Insert sessions with their first attempt; existing sessions are left alone.

    Returns the ids of the attempts created: one per session that did not exist yet.
    """
    if not new:
        return []
    # One per session, as the unique key allows (the last one wins).
    unique = list({item.key: item for item in new}.values())
    if dialect_of(conn).chains_inserts:
        return _insert_sessions_at_once(conn, unique, now)
    by_key = {item.key: item for item in unique}
    returned = (
        sessions.c.id,
        sessions.c.project_id,
        sessions.c.workflow_name,
        sessions.c.session_time,
    )
    session_rows = [{**item.session_values(), "created_at": now} for item in unique]
    created = insert_rows(conn, sessions, session_rows, returned, ignore_conflicts=True)
    if not created:
        return []
    attempt_rows = [
        {
            "session_id": row.id,
            **by_key[(row.project_id, row.workflow_name, row.session_time)].attempt_values(),
            "params": {},
            "created_at": now,
        }
        for row in created
    ]
    return [int(row.id) for row in insert_rows(conn, attempts, attempt_rows, (attempts.c.id,))]


_KEY_COLUMNS = ("project_id", "workflow_name", "session_time", "schedule_id")
_ATTEMPT_COLUMNS = (
    "name",
    "workflow_definition_id",
    "state",
    "timezone",
    "project_dir",
    "backfill_id",
)


def _insert_sessions_at_once(
    conn: Connection, unique: Sequence[NewSession], now: datetime
) -> list[int]:
    """PostgreSQL: :func:`insert_sessions` in one statement, sessions and attempts together.

    ``WITH new AS (unnest ...), inserted AS (INSERT INTO sessions ... ON CONFLICT DO
    NOTHING RETURNING ...) INSERT INTO attempts SELECT ... FROM inserted JOIN new``: the
    sessions created never travel back to be turned into attempts.
    """
    rows = [{**item.key_values(), **item.attempt_values()} for item in unique]
    wanted = rows_select(rows, column_types(sessions, attempts)).cte("new_sessions")
    created_at = literal(now, sessions.c.created_at.type)
    # Each INSERT ... SELECT names its columns with the values they take; the server
    # draws the UUIDs, which would cost the scheduler more to draw and send.
    session_values = {
        **{name: wanted.c[name] for name in _KEY_COLUMNS},
        "session_uuid": cast(func.gen_random_uuid(), Text),
        "created_at": created_at,
    }
    inserted = (
        dialect_of(conn)
        .insert_ignoring_conflicts(sessions)
        .from_select(list(session_values), select(*session_values.values()))
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
    attempt_values = {
        "session_id": inserted.c.id,
        **{name: wanted.c[name] for name in _ATTEMPT_COLUMNS},
        "params": literal({}, attempts.c.params.type),
        "created_at": created_at,
    }
    attempt_rows = select(*attempt_values.values()).select_from(inserted.join(wanted, matching))
    statement = (
        attempts.insert().from_select(list(attempt_values), attempt_rows).returning(attempts.c.id)
    )
    return [int(attempt_id) for attempt_id in conn.execute(statement).scalars()]


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
    update_rows(conn, schedules, rows, {"failures": 0, "last_error": None})


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
    return [
        Waiting(attempt_id=int(row.id), schedule_id=row.schedule_id, backfill_id=row.backfill_id)
        for row in conn.execute(query)
    ]


def lock_rows(conn: Connection, table: Any, ids: Collection[int]) -> set[int]:
    """Lock rows of ``table`` for this transaction; the ids another transaction holds are left."""
    if not ids:
        return set()
    query = dialect_of(conn).skip_locked(select(table.c.id).where(table.c.id.in_(list(ids))))
    return {int(found) for found in conn.execute(query).scalars()}


def backfill_active_counts(conn: Connection, backfill_ids: Collection[int]) -> dict[int, int]:
    """Created or running attempts of each backfill."""
    if not backfill_ids:
        return {}
    query = (
        select(attempts.c.backfill_id, func.count().label("attempt_count"))
        .where(attempts.c.backfill_id.in_(list(backfill_ids)), attempts.c.state.in_(ACTIVE))
        .group_by(attempts.c.backfill_id)
    )
    return {int(row.backfill_id): int(row.attempt_count) for row in conn.execute(query)}


def backfill_parallel(conn: Connection, backfill_ids: Collection[int]) -> dict[int, bool]:
    """Whether each backfill may run its sessions side by side."""
    query = select(backfills.c.id, backfills.c.parallel).where(
        backfills.c.id.in_(list(backfill_ids))
    )
    return {int(row.id): bool(row.parallel) for row in conn.execute(query)}


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


MAX_BACKFILL = 10_000
"""The most session times one backfill (or its dry run) covers: each costs a step of the
schedule's arithmetic, and all of them are listed in the answer."""


def backfill_times(spec: ScheduleSpec, first: datetime, last: datetime) -> list[datetime]:
    """The session times from ``first`` up to ``last`` (inclusive), each computed once.

    Raises Conflict past MAX_BACKFILL times.
    """
    times: list[datetime] = []
    current = first - EPSILON
    while (following := spec.next_session_time(current)) is not None and following <= last:
        if len(times) == MAX_BACKFILL:
            raise Conflict(f"the backfill range holds more than {MAX_BACKFILL} session times")
        times.append(following)
        current = following
    return times


def backfill(
    conn: Connection,
    row: ScheduleRow,
    first: datetime,
    last: datetime,
    now: datetime,
    *,
    parallel: bool = False,
    dry_run: bool = False,
    times: Sequence[datetime] | None = None,
) -> BackfillPlan:
    """Sessions for every scheduled time in ``[first, last]``; existing sessions are kept.

    The sessions run one after another (oldest first) unless ``parallel``. ``times`` are
    those session times when the caller has computed them (see :func:`backfill_times`).
    Raises Conflict for a range that ends before it starts or holds more than MAX_BACKFILL.
    """
    if last < first:
        raise Conflict("the backfill range ends before it starts")
    if times is None:
        times = backfill_times(row.schedule, first, last)
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
            NewSession.of(row, session_time, AttemptState.WAITING, int(backfill_id))
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
