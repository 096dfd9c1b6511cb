"""Sessions (one per project, workflow and session time) and their attempts."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import Connection, Select, bindparam, func, select

from tickwork.shared.domain.choices import parse_choice
from tickwork.shared.domain.states import KILLABLE_ATTEMPT_STATES, AttemptState
from tickwork.shared.errors import NotFound
from tickwork.shared.store.dialects import StoreDialect, dialect_of
from tickwork.shared.store.engine import WORK_CHANNEL
from tickwork.shared.store.history import ATTEMPT_VIEW_COLUMNS, AttemptView, attempt_view
from tickwork.shared.store.partitions import AttemptSet, restrict
from tickwork.shared.store.sql import insert_ignoring_conflict
from tickwork.shared.store.tables import attempts, projects, sessions


@dataclass(frozen=True)
class AttemptRow:
    """One attempt joined with its session: what the executor needs to run it."""

    id: int
    name: str
    session_id: int
    session_uuid: str
    session_time: datetime
    project_id: int
    workflow_name: str
    workflow_definition_id: int
    state: AttemptState
    timezone: str
    params: dict[str, Any]
    resume_from_attempt_id: int | None
    project_dir: str | None
    created_at: datetime
    finished_at: datetime | None
    skip_tasks: list[str] | None = None  # done without running (`run --end/--goal`)


_ATTEMPT_COLUMNS = (
    attempts.c.id,
    attempts.c.name,
    attempts.c.session_id,
    sessions.c.session_uuid,
    sessions.c.session_time,
    sessions.c.project_id,
    sessions.c.workflow_name,
    attempts.c.workflow_definition_id,
    attempts.c.state,
    attempts.c.timezone,
    attempts.c.params,
    attempts.c.resume_from_attempt_id,
    attempts.c.project_dir,
    attempts.c.created_at,
    attempts.c.finished_at,
    attempts.c.skip_tasks,
)


def _attempt_from_row(row: Any) -> AttemptRow:
    values = dict(row._mapping)
    values["state"] = parse_choice(
        AttemptState, values["state"], f"state of attempt {values['id']}"
    )
    return AttemptRow(**values)


def ensure_session(
    conn: Connection,
    *,
    project_id: int,
    workflow_name: str,
    session_time: datetime,
    now: datetime,
) -> int:
    """The id of the one session for (project, workflow, session time); idempotent."""
    session_id, _created = claim_session(
        conn,
        project_id=project_id,
        workflow_name=workflow_name,
        session_time=session_time,
        now=now,
    )
    return session_id


def claim_session(
    conn: Connection,
    *,
    project_id: int,
    workflow_name: str,
    session_time: datetime,
    now: datetime,
) -> tuple[int, bool]:
    """The id of the one session for (project, workflow, session time), and whether this
    call created it (then it has no attempt yet); idempotent. A new session costs one
    statement, an existing one two."""
    created = insert_ignoring_conflict(
        conn,
        sessions,
        {
            "project_id": project_id,
            "workflow_name": workflow_name,
            "session_time": session_time,
            "session_uuid": str(uuid.uuid4()),
            "created_at": now,
        },
    )
    if created is not None:
        return created, True
    query = select(sessions.c.id).where(
        sessions.c.project_id == project_id,
        sessions.c.workflow_name == workflow_name,
        sessions.c.session_time == session_time,
    )
    return int(conn.execute(query).scalar_one()), False


def insert_attempt(
    conn: Connection,
    *,
    session_id: int,
    name: str,
    workflow_definition_id: int,
    timezone: str,
    params: dict[str, Any],
    now: datetime,
    resume_from_attempt_id: int | None = None,
    project_dir: str | None = None,
    resume_only: list[str] | None = None,
    skip_tasks: list[str] | None = None,
) -> int | None:
    """Insert an attempt in state ``created``; None if the session already has ``name``.
    ``resume_only`` limits what it takes from the attempt it resumes to those tasks;
    ``skip_tasks`` are done without running."""
    return insert_ignoring_conflict(
        conn,
        attempts,
        {
            "session_id": session_id,
            "name": name,
            "workflow_definition_id": workflow_definition_id,
            "state": AttemptState.CREATED.value,
            "timezone": timezone,
            "params": params,
            "resume_from_attempt_id": resume_from_attempt_id,
            "resume_only": resume_only,
            "skip_tasks": skip_tasks,
            "project_dir": project_dir,
            "created_at": now,
        },
    )


def create_session_with_attempt(
    conn: Connection,
    *,
    project_id: int,
    project_name: str,
    workflow_name: str,
    session_time: datetime,
    attempt: dict[str, Any],
    now: datetime,
) -> AttemptView | None:
    """PostgreSQL (a dialect that ``chains_inserts``): a new session with its first attempt
    in one statement that also wakes executors, as :func:`claim_session`,
    :func:`insert_attempt` and ``notify_work`` would in three. ``attempt`` gives the
    attempt's ``name``, ``workflow_definition_id``, ``timezone``, ``params`` and
    ``idempotency_key``; it is created in state ``created``.

    The new attempt as stored (the values the insert returned: what reading it back would
    give); None when no attempt was created, and nothing signalled: the session existed,
    or the attempt would break a unique key (its idempotency key was just taken; the new
    session then stays without an attempt, as :func:`claim_session`'s would).
    """
    values = {
        "project_id": project_id,
        "workflow_name": workflow_name,
        "session_time": session_time,
        "session_uuid": str(uuid.uuid4()),
        "now": now,
        "state": AttemptState.CREATED.value,
        "channel": WORK_CHANNEL,
        "project_name": project_name,
        **{f"attempt_{name}": value for name, value in attempt.items()},
    }
    row = conn.execute(_session_with_attempt_statement(dialect_of(conn)), values).first()
    return None if row is None else attempt_view(row[:-1])  # the last column: the signal


_NEW_ATTEMPT_COLUMNS = ("name", "workflow_definition_id", "timezone", "params", "idempotency_key")


@lru_cache(maxsize=4)
def _session_with_attempt_statement(dialect: StoreDialect) -> Select[Any]:
    """``WITH new_session AS (INSERT INTO sessions ... ON CONFLICT DO NOTHING RETURNING
    ...), new_attempt AS (INSERT INTO attempts SELECT ... FROM new_session ON CONFLICT DO
    NOTHING RETURNING ...) SELECT ..., pg_notify(...) FROM new_attempt JOIN new_session``,
    made once per dialect with bound parameters. pg_notify runs once per row returned: only
    when an attempt was created, and like any NOTIFY it is sent when the transaction
    commits."""
    now = bindparam("now", type_=sessions.c.created_at.type)
    of_session = [c for c in ATTEMPT_VIEW_COLUMNS if c.table is sessions]
    of_attempt = [c for c in ATTEMPT_VIEW_COLUMNS if c.table is attempts]
    new_session = (
        dialect.insert_ignoring_conflicts(sessions)
        .values(
            project_id=bindparam("project_id", type_=sessions.c.project_id.type),
            workflow_name=bindparam("workflow_name", type_=sessions.c.workflow_name.type),
            session_time=bindparam("session_time", type_=sessions.c.session_time.type),
            session_uuid=bindparam("session_uuid", type_=sessions.c.session_uuid.type),
            created_at=now,
        )
        .returning(sessions.c.id, *of_session)
        .cte("new_session")
    )
    given = [
        bindparam(f"attempt_{name}", type_=attempts.c[name].type) for name in _NEW_ATTEMPT_COLUMNS
    ]
    state = bindparam("state", type_=attempts.c.state.type)
    new_attempt = (
        dialect.insert_ignoring_conflicts(attempts)
        .from_select(
            ["session_id", *_NEW_ATTEMPT_COLUMNS, "state", "created_at"],
            select(new_session.c.id, *given, state, now),
        )
        .returning(*of_attempt)
        .cte("new_attempt")
    )
    # The attempt's view, the project's name as given (the one column neither wrote).
    project_name = bindparam("project_name", type_=projects.c.name.type)
    written = [
        (new_attempt if c.table is attempts else new_session).c[c.key]
        if c.table is not None
        else project_name.label(c.key)
        for c in ATTEMPT_VIEW_COLUMNS
    ]
    return select(*written, func.pg_notify(bindparam("channel"), "")).select_from(
        new_attempt.join(new_session, new_session.c.id == new_attempt.c.session_id)
    )


def get_attempt(conn: Connection, attempt_id: int) -> AttemptRow:
    """One attempt with its session."""
    query = (
        select(*_ATTEMPT_COLUMNS)
        .select_from(attempts.join(sessions))
        .where(attempts.c.id == attempt_id)
    )
    return _attempt_from_row(conn.execute(query).one())


def list_session_attempts(conn: Connection, session_id: int) -> list[AttemptRow]:
    """Every attempt of a session, oldest first."""
    query = (
        select(*_ATTEMPT_COLUMNS)
        .select_from(attempts.join(sessions))
        .where(attempts.c.session_id == session_id)
        .order_by(attempts.c.id)
    )
    return [_attempt_from_row(row) for row in conn.execute(query)]


def list_attempt_ids_in_state(
    conn: Connection,
    state: AttemptState,
    limit: int,
    *,
    among: AttemptSet = None,
) -> list[int]:
    """Ids of attempts in ``state``, oldest first; only those in ``among`` if given."""
    query = select(attempts.c.id).where(attempts.c.state == state.value)
    query = restrict(query, attempts.c.id, among)
    query = query.order_by(attempts.c.id).limit(limit)
    return [int(i) for i in conn.execute(query).scalars()]


def get_attempt_state(conn: Connection, attempt_id: int) -> AttemptState:
    """The state of one attempt; raises NotFound if there is none."""
    query = select(attempts.c.state).where(attempts.c.id == attempt_id)
    state = conn.execute(query).scalar_one_or_none()
    if state is None:
        raise NotFound(f"no attempt {attempt_id}")
    return parse_choice(AttemptState, state, f"state of attempt {attempt_id}")


def set_attempt_state(
    conn: Connection,
    attempt_id: int,
    state: AttemptState,
    now: datetime,
    *,
    from_states: tuple[AttemptState, ...],
) -> bool:
    """Move an attempt to ``state`` if it is in one of ``from_states``; True if it moved."""
    values: dict[str, Any] = {"state": state.value}
    if state.is_done:
        values["finished_at"] = now
    result = conn.execute(
        attempts.update()
        .where(attempts.c.id == attempt_id, attempts.c.state.in_([s.value for s in from_states]))
        .values(**values)
    )
    return result.rowcount == 1


def request_kill(conn: Connection, attempt_id: int, now: datetime) -> AttemptState:
    """Ask for an attempt to be killed; its state afterwards (CANCELING, or the state it
    had already ended in). Raises NotFound for an unknown attempt."""
    state = get_attempt_state(conn, attempt_id)
    if state is AttemptState.CANCELING or state.is_done:
        return state
    moved = set_attempt_state(
        conn, attempt_id, AttemptState.CANCELING, now, from_states=KILLABLE_ATTEMPT_STATES
    )
    return AttemptState.CANCELING if moved else get_attempt_state(conn, attempt_id)


def retry_attempt_name(conn: Connection, attempt: AttemptRow) -> str | None:
    """The attempt's name when it retries its session (an earlier attempt of the session
    exists), as Digdag's ``${retry_attempt_name}``; None for a session's first attempt."""
    earlier = select(attempts.c.id).where(
        attempts.c.session_id == attempt.session_id, attempts.c.id < attempt.id
    )
    return attempt.name if conn.execute(earlier.limit(1)).first() is not None else None


def last_executed_session_time(
    conn: Connection, project_id: int, workflow_name: str, before: datetime
) -> datetime | None:
    """The latest session time before ``before`` of the workflow's sessions that started
    an attempt (one held back by its schedule's policy does not count)."""
    query = (
        select(func.max(sessions.c.session_time))
        .join(attempts, attempts.c.session_id == sessions.c.id)
        .where(
            sessions.c.project_id == project_id,
            sessions.c.workflow_name == workflow_name,
            sessions.c.session_time < before,
            attempts.c.state != AttemptState.WAITING.value,
        )
    )
    found: datetime | None = conn.execute(query).scalar_one_or_none()
    return found


@dataclass(frozen=True)
class AttemptFacts:
    """What notifications and triggers say of an attempt: it, its session and project."""

    id: int
    name: str
    state: str
    session_id: int
    project_id: int
    project: str
    workflow_name: str
    session_time: datetime


_FACTS = (
    select(
        attempts.c.id,
        attempts.c.name,
        attempts.c.state,
        sessions.c.id.label("session_id"),
        sessions.c.project_id,
        projects.c.name.label("project"),
        sessions.c.workflow_name,
        sessions.c.session_time,
    )
    .join(sessions, sessions.c.id == attempts.c.session_id)
    .join(projects, projects.c.id == sessions.c.project_id)
)


def attempt_facts(conn: Connection, attempt_id: int) -> AttemptFacts | None:
    """The attempt, its session and its project's name, in one read; None if missing."""
    row = conn.execute(_FACTS.where(attempts.c.id == attempt_id)).first()
    return None if row is None else AttemptFacts(**row._mapping)
