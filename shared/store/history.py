"""What ran: sessions with their last attempt, attempts, task trees and log files."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, Generic, NamedTuple, TypeVar

from sqlalchemy import (
    ColumnElement,
    Connection,
    DateTime,
    Select,
    bindparam,
    case,
    func,
    null,
    select,
    type_coerce,
)
from sqlalchemy.orm import aliased

from tickwork.shared.display import elapsed_seconds
from tickwork.shared.domain.choices import parse_choice
from tickwork.shared.domain.states import CURRENT_ERROR_STATES, AttemptState, TaskState
from tickwork.shared.errors import NotFound
from tickwork.shared.store.paging import fetch_statement_page, keyset_statement
from tickwork.shared.store.tables import (
    attempts,
    projects,
    sessions,
    task_dependencies,
    tasks,
    workflow_definitions,
)
from tickwork.shared.store.tasks import TaskRow, list_attempt_tasks


class AttemptView(NamedTuple):
    """One attempt with the names of its session, project and workflow.

    A tuple of plain values, as :class:`TaskSummary`: pages build a hundred at a time, and
    a tuple is made in a fraction of a frozen dataclass's time."""

    id: int
    name: str
    session_id: int
    session_uuid: str
    session_time: datetime
    project_id: int
    project_name: str
    workflow_name: str
    workflow_definition_id: int
    state: AttemptState
    timezone: str
    params: dict[str, Any]
    resume_from_attempt_id: int | None
    resume_only: list[str] | None
    idempotency_key: str | None
    created_at: datetime
    finished_at: datetime | None

    @property
    def duration_seconds(self) -> float | None:
        """From the attempt's creation to its end; None until it ends."""
        return elapsed_seconds(self.created_at, self.finished_at)


class SessionView(NamedTuple):
    """One session with its latest attempt (None while it has none); a tuple, as
    :class:`AttemptView`."""

    id: int
    session_uuid: str
    session_time: datetime
    project_id: int
    project_name: str
    workflow_name: str
    schedule_id: int | None
    created_at: datetime
    last_attempt: AttemptView | None


T = TypeVar("T")


@dataclass(frozen=True)
class Page(Generic[T]):
    """One keyset page, newest first, and the id to continue after (None: last page)."""

    items: list[T]
    next_after: int | None


@dataclass(frozen=True)
class TaskNode:
    """One task of an attempt, its own name and the ids of the tasks it waits for."""

    task: TaskRow
    name: str
    """The task's name within its parent: its full name after the parent's (``+load``,
    ``^error``); a root task's full name."""
    upstream_ids: list[int]

    @property
    def duration_seconds(self) -> float | None:
        """From the task's first start to its end, retries included; None until it ends."""
        return elapsed_seconds(self.task.started_at, self.task.finished_at)


class TaskSummary(NamedTuple):
    """One task of an attempt as a page of it shows it: no config, params or result, and
    of its error only the message (None when it has none or is not in error).

    A tuple of plain values, so the garbage collector stops tracking the thousands a
    large attempt has: a page of them does not set off full collections."""

    id: int
    parent_id: int | None
    full_name: str
    name: str
    """The task's name within its parent, as :attr:`TaskNode.name`."""
    position: int
    is_group: bool
    state: str
    retry_count: int
    started_at: datetime | None
    finished_at: datetime | None
    error_message: str | None
    upstream_ids: tuple[int, ...]
    display_state: str = ""
    """The state a page shows: read as the task's own; the attempt read model
    (services/api/reads/attempts.py) gives a group that has not ended the most active
    state among its descendants."""
    waiting_for_pool: str | None = None
    """The pool (``_pool``) of a READY task: it waits for one of its slots; else None."""

    @property
    def duration_seconds(self) -> float | None:
        """From the task's first start to its end, retries included; None until it ends."""
        return elapsed_seconds(self.started_at, self.finished_at)


ATTEMPT_VIEW_COLUMNS = (
    # AttemptView's fields, in its order: every read of an attempt selects these.
    attempts.c.id,
    attempts.c.name,
    attempts.c.session_id,
    sessions.c.session_uuid,
    sessions.c.session_time,
    sessions.c.project_id,
    projects.c.name.label("project_name"),
    sessions.c.workflow_name,
    attempts.c.workflow_definition_id,
    attempts.c.state,
    attempts.c.timezone,
    attempts.c.params,
    attempts.c.resume_from_attempt_id,
    attempts.c.resume_only,
    attempts.c.idempotency_key,
    attempts.c.created_at,
    attempts.c.finished_at,
)
_ATTEMPTS_FROM = attempts.join(sessions, sessions.c.id == attempts.c.session_id).join(
    projects, projects.c.id == sessions.c.project_id
)


def _as_read(column: ColumnElement[Any], name: str) -> ColumnElement[Any]:
    """A timestamp column of a page read as the driver gives it, without the store's UTC
    conversion of each value (PostgreSQL's are aware UTC already; SQLite's naive ones
    are made UTC by the page's own code, once per row)."""
    return type_coerce(column, DateTime(timezone=True)).label(name)


_SESSION_COLUMNS = (
    sessions.c.id,
    sessions.c.session_uuid,
    _as_read(sessions.c.session_time, "session_time"),
    sessions.c.project_id,
    projects.c.name.label("project_name"),
    sessions.c.workflow_name,
    sessions.c.schedule_id,
    _as_read(sessions.c.created_at, "created_at"),
)


_STATE_INDEX = AttemptView._fields.index("state")
_ATTEMPT_STATES = {state.value: state for state in AttemptState}


def _attempt_state(value: str, attempt_id: int) -> AttemptState:
    """A stored attempt state as its member: a dict lookup, as each row of a page needs;
    UnknownValue naming the attempt for a value that is none."""
    found = _ATTEMPT_STATES.get(value)
    if found is None:
        return parse_choice(AttemptState, value, f"state of attempt {attempt_id}")
    return found


def attempt_view(row: Any) -> AttemptView:
    """An attempt's view from a row of :data:`ATTEMPT_VIEW_COLUMNS`, in their order."""
    values = list(row)
    values[_STATE_INDEX] = _attempt_state(values[_STATE_INDEX], values[0])
    return AttemptView._make(values)


def _attempt_query() -> Select[Any]:
    return select(*ATTEMPT_VIEW_COLUMNS).select_from(_ATTEMPTS_FROM)


@dataclass(frozen=True)
class RunFilters:
    """What a sessions or attempts list is filtered by; None (or empty) filters nothing.

    ``project`` and ``workflow`` are exact names; ``project_contains`` and
    ``workflow_contains`` keep names holding that text, whatever its case; ``state`` is
    the (latest) attempt's; ``time_from`` (inclusive) and ``time_to`` (exclusive) bound
    the session time; ``project_ids`` keeps the sessions of those projects only (what a
    token limited to projects sees; None: every project, empty: none)."""

    project: str | None = None
    workflow: str | None = None
    project_contains: str | None = None
    workflow_contains: str | None = None
    state: AttemptState | None = None
    time_from: datetime | None = None
    time_to: datetime | None = None
    project_ids: frozenset[int] | None = None


def contains_pattern(text: str) -> str:
    """The LIKE pattern (escaped with ``\\``) of names holding ``text``, lower case."""
    escaped = text.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _filters(given: RunFilters) -> dict[str, Any]:
    """The filters given, by the name of the bound parameter each fills."""
    values = {
        "project": given.project,
        "workflow": given.workflow,
        "project_contains": given.project_contains and contains_pattern(given.project_contains),
        "workflow_contains": given.workflow_contains and contains_pattern(given.workflow_contains),
        "state": None if given.state is None else given.state.value,
        "time_from": given.time_from,
        "time_to": given.time_to,
    }
    found: dict[str, Any] = {name: value for name, value in values.items() if value}
    if given.project_ids is not None:  # empty too: it keeps nothing
        found["project_ids"] = sorted(given.project_ids)
    return found


def _name_like(column: ColumnElement[str], parameter: str) -> ColumnElement[bool]:
    return func.lower(column).like(bindparam(parameter), escape="\\")


def _filter_conditions(names: frozenset[str]) -> list[ColumnElement[bool]]:
    """The conditions on a session of the filters ``names`` (but ``state``), each bound to
    the parameter of its name."""
    found: list[ColumnElement[bool]] = []
    if "project" in names:
        # A scalar subquery, so the project's id drives ix_sessions_project_workflow_id.
        project_id = (
            select(projects.c.id).where(projects.c.name == bindparam("project")).scalar_subquery()
        )
        found.append(sessions.c.project_id == project_id)
    if "workflow" in names:
        found.append(sessions.c.workflow_name == bindparam("workflow"))
    # A partial name is matched on the few project and workflow names first; sessions are
    # then kept by project id or workflow name, through the indexes an exact name uses.
    if "project_contains" in names:
        matching = select(projects.c.id).where(_name_like(projects.c.name, "project_contains"))
        found.append(sessions.c.project_id.in_(matching))
    if "workflow_contains" in names:
        names_matching = (
            select(workflow_definitions.c.name)
            .where(_name_like(workflow_definitions.c.name, "workflow_contains"))
            .distinct()
        )
        found.append(sessions.c.workflow_name.in_(names_matching))
    if "project_ids" in names:
        found.append(sessions.c.project_id.in_(bindparam("project_ids", expanding=True)))
    if "time_from" in names:
        found.append(sessions.c.session_time >= bindparam("time_from"))
    if "time_to" in names:
        found.append(sessions.c.session_time < bindparam("time_to"))
    return found


def list_sessions(
    conn: Connection,
    *,
    project: str | None = None,
    workflow: str | None = None,
    state: AttemptState | None = None,
    time_from: datetime | None = None,
    time_to: datetime | None = None,
    where: RunFilters | None = None,
    after: int | None = None,
    limit: int = 100,
) -> Page[SessionView]:
    """Sessions newest first (by id), each with its latest attempt.

    ``state`` keeps sessions whose latest attempt is in it; ``time_from`` (inclusive) and
    ``time_to`` (exclusive) bound the session time; ``where`` gives every filter at once
    (the keywords then filter nothing). The latest attempts are read for the page's
    sessions only, one index probe each.
    """
    given = where or RunFilters(project, workflow, None, None, state, time_from, time_to)
    filters = _filters(given)
    statement = _session_page_statement(frozenset(filters), after is not None)
    page = fetch_statement_page(conn, statement, filters, after=after, limit=limit)
    return Page([_session_view(row) for row in page.rows], page.next_after)


@lru_cache(maxsize=128)
def _session_page_statement(filters: frozenset[str], after: bool) -> Select[Any]:
    """The page statement of :func:`list_sessions` with ``filters``, made once each."""
    query = _sessions_in_state() if "state" in filters else _sessions_with_latest_attempt()
    query = query.where(*_filter_conditions(filters))
    return keyset_statement(query, sessions.c.id, after=after)


# The latest attempt of a session, joined in the page's own query: one backward probe of
# ix_attempts_session_id per session row, and one round trip for the whole page.
_LATEST = aliased(attempts, name="latest")
_LATEST_PREFIX = "latest_"
# The attempt's own columns but its session's id, which the session's row gives.
_LATEST_COLUMNS = tuple(
    _as_read(_LATEST.c[column.key], _LATEST_PREFIX + column.key)
    if column.key in ("created_at", "finished_at")
    else _LATEST.c[column.key].label(_LATEST_PREFIX + column.key)
    for column in ATTEMPT_VIEW_COLUMNS
    if column.table is attempts and column.key != "session_id"
)


def _sessions_with_latest_attempt() -> Select[Any]:
    newest_id = (
        select(func.max(attempts.c.id))
        .where(attempts.c.session_id == sessions.c.id)
        .correlate(sessions)
        .scalar_subquery()
    )
    return select(*_SESSION_COLUMNS, *_LATEST_COLUMNS).select_from(
        sessions.join(projects, projects.c.id == sessions.c.project_id).outerjoin(
            _LATEST, _LATEST.c.id == newest_id
        )
    )


def _sessions_in_state() -> Select[Any]:
    """Sessions whose latest attempt is in the state bound to ``state``, read from that
    state's attempts newest session first (ix_attempts_state_session_id), each kept when
    no newer attempt of its session exists: a page costs what an unfiltered one does,
    however rare the state, instead of a probe per session until the page is full."""
    newer = select(attempts.c.id).where(
        attempts.c.session_id == _LATEST.c.session_id, attempts.c.id > _LATEST.c.id
    )
    return (
        select(*_SESSION_COLUMNS, *_LATEST_COLUMNS)
        .select_from(
            _LATEST.join(sessions, sessions.c.id == _LATEST.c.session_id).join(
                projects, projects.c.id == sessions.c.project_id
            )
        )
        .where(_LATEST.c.state == bindparam("state"), ~newer.exists())
    )


_SESSION_WIDTH = len(_SESSION_COLUMNS)
# Where the latest attempt's columns sit in a session row: they follow the session's.
_LATEST_ID, _LATEST_NAME, _LATEST_DEFINITION, _LATEST_STATE = (
    _SESSION_WIDTH + [c.key for c in _LATEST_COLUMNS].index(_LATEST_PREFIX + name)
    for name in ("id", "name", "workflow_definition_id", "state")
)
_new_tuple = tuple.__new__


def _session_view(row: Any) -> SessionView:
    # By position, each view made straight from its values: this runs once per row of
    # every page. The session's first six columns are the attempt's session_id to
    # workflow_name; the latest attempt's follow (_LATEST_COLUMNS, without session_id).
    values = tuple(row)
    if values[2].tzinfo is None:  # naive times (SQLite's): all of the row's are
        values = tuple(_utc(v) if isinstance(v, datetime) else v for v in values)
    attempt_id = values[_LATEST_ID]
    last = None
    if attempt_id is not None:
        last = _new_tuple(
            AttemptView,
            (
                attempt_id,
                values[_LATEST_NAME],
                *values[:6],
                values[_LATEST_DEFINITION],
                _attempt_state(values[_LATEST_STATE], attempt_id),
                *values[_LATEST_STATE + 1 :],
            ),
        )
    return _new_tuple(SessionView, (*values[:_SESSION_WIDTH], last))


def get_session(conn: Connection, session_id: int) -> SessionView:
    """One session with its latest attempt; raises NotFound if there is none."""
    query = _sessions_with_latest_attempt().where(sessions.c.id == session_id)
    row = conn.execute(query).one_or_none()
    if row is None:
        raise NotFound(f"no session {session_id}")
    return _session_view(row)


def list_session_attempts(conn: Connection, session_id: int) -> list[AttemptView]:
    """Every attempt of a session, newest first; raises NotFound for an unknown session."""
    if conn.execute(select(sessions.c.id).where(sessions.c.id == session_id)).first() is None:
        raise NotFound(f"no session {session_id}")
    query = _attempt_query().where(attempts.c.session_id == session_id)
    return [attempt_view(row) for row in conn.execute(query.order_by(attempts.c.id.desc()))]


def list_attempts(
    conn: Connection,
    *,
    project: str | None = None,
    workflow: str | None = None,
    state: AttemptState | None = None,
    time_from: datetime | None = None,
    time_to: datetime | None = None,
    where: RunFilters | None = None,
    after: int | None = None,
    limit: int = 100,
) -> Page[AttemptView]:
    """Attempts newest first (by id), filtered by project, workflow, state and the session
    time (``time_from`` inclusive, ``time_to`` exclusive), or by ``where`` as
    :func:`list_sessions`."""
    given = where or RunFilters(project, workflow, None, None, state, time_from, time_to)
    filters = _filters(given)
    session_ids = _few_matching_sessions(conn, filters)
    if session_ids is not None:
        # A rare project, workflow or time range: its attempts by their sessions' ids.
        filters = {name: filters[name] for name in ("state",) if name in filters}
        filters["session_ids"] = session_ids
    statement = _attempt_page_statement(frozenset(filters), after is not None)
    page = fetch_statement_page(conn, statement, filters, after=after, limit=limit)
    return Page([attempt_view(row) for row in page.rows], page.next_after)


FEW_SESSIONS = 1000
"""Most sessions a filter of the attempts list may keep for their attempts to be read by
session id; past it, attempts are read newest first, checking each one's session."""
_SESSION_FILTERS = frozenset(
    {
        "project",
        "workflow",
        "project_contains",
        "workflow_contains",
        "project_ids",
        "time_from",
        "time_to",
    }
)


def _few_matching_sessions(conn: Connection, filters: dict[str, Any]) -> list[int] | None:
    """The ids of the sessions the filters on sessions keep, when there are at most
    :data:`FEW_SESSIONS` (None: more, or no such filter). Newest first by attempt id, a
    rare project's attempts would be found only after walking every other attempt; by
    their sessions' ids they are a few index probes away."""
    names = frozenset(filters) & _SESSION_FILTERS
    if not names:
        return None
    bound = {name: filters[name] for name in names}
    found = conn.execute(_matching_sessions_statement(names), bound).scalars().all()
    return None if len(found) > FEW_SESSIONS else [int(found_id) for found_id in found]


@lru_cache(maxsize=64)
def _matching_sessions_statement(filters: frozenset[str]) -> Select[Any]:
    return (
        select(sessions.c.id)
        .where(*_filter_conditions(filters))
        .order_by(sessions.c.id.desc())
        .limit(FEW_SESSIONS + 1)
    )


@lru_cache(maxsize=128)
def _attempt_page_statement(filters: frozenset[str], after: bool) -> Select[Any]:
    """The page statement of :func:`list_attempts` with ``filters``, made once each;
    ``session_ids`` (an expanding parameter) keeps the attempts of those sessions."""
    query = _attempt_query().where(*_filter_conditions(filters))
    if "session_ids" in filters:
        query = query.where(attempts.c.session_id.in_(bindparam("session_ids", expanding=True)))
    if "state" in filters:
        query = query.where(attempts.c.state == bindparam("state"))
    return keyset_statement(query, attempts.c.id, after=after)


_ATTEMPT_BY_ID = _attempt_query().where(attempts.c.id == bindparam("attempt_id"))


def get_attempt_view(conn: Connection, attempt_id: int) -> AttemptView:
    """One attempt with its project and workflow names; raises NotFound if there is none."""
    row = conn.execute(_ATTEMPT_BY_ID, {"attempt_id": attempt_id}).one_or_none()
    if row is None:
        raise NotFound(f"no attempt {attempt_id}")
    return attempt_view(row)


def list_task_tree(conn: Connection, attempt_id: int) -> list[TaskNode]:
    """Every task of an attempt in creation order, each with its upstream task ids.

    Raises NotFound for an unknown attempt.
    """
    get_attempt_view(conn, attempt_id)
    rows = list_attempt_tasks(conn, attempt_id)
    upstreams = _upstream_ids(conn, attempt_id, [task.id for task in rows])
    full_names = {task.id: task.full_name for task in rows}
    return [
        TaskNode(task, _own_name(task, full_names), upstreams.get(task.id, [])) for task in rows
    ]


_SUMMARY_QUERY = select(
    tasks.c.id,
    tasks.c.parent_id,
    tasks.c.full_name,
    tasks.c.position,
    tasks.c.is_group,
    tasks.c.state,
    tasks.c.retry_count,
    # Read as the driver gives them: thousands of rows skip the store's UTC conversion
    # (PostgreSQL's are aware already; SQLite's naive ones are made UTC below).
    type_coerce(tasks.c.started_at, DateTime(timezone=True)),
    type_coerce(tasks.c.finished_at, DateTime(timezone=True)),
    case(
        (tasks.c.state.in_(CURRENT_ERROR_STATES), tasks.c.error["message"].as_string()),
        else_=null(),
    ),
    case((tasks.c.state == TaskState.READY.value, tasks.c.pool), else_=null()),
)


def list_task_summaries(conn: Connection, attempt_id: int) -> list[TaskSummary]:
    """Every task of an attempt in creation order, each with its upstream task ids, the
    message of its current error and the pool a ready one waits for, without the JSON
    columns a page does not show (none for an unknown attempt).

    The rows are turned into summaries as they are read (a parent comes before its
    children: its id is smaller), so thousands of rows are never held at once."""
    edges = _attempt_edges(conn, attempt_id)
    query = _SUMMARY_QUERY.where(tasks.c.attempt_id == attempt_id).order_by(tasks.c.id)
    full_names: dict[int, str] = {}
    found: list[TaskSummary] = []
    next_edge = 0
    for task_id, parent_id, full_name, *values, message, pool in conn.execute(query):
        while next_edge < len(edges) and edges[next_edge][0] < task_id:
            next_edge += 1
        first_edge = next_edge
        while next_edge < len(edges) and edges[next_edge][0] == task_id:
            next_edge += 1
        full_names[task_id] = full_name
        position, is_group, state, retry_count, started_at, finished_at = values
        parent_name = None if parent_id is None else full_names.get(parent_id)
        found.append(
            TaskSummary(
                id=task_id,
                parent_id=parent_id,
                full_name=full_name,
                name=_name_within(full_name, parent_name),
                position=position,
                is_group=bool(is_group),
                state=state,
                retry_count=retry_count or 0,
                started_at=_utc(started_at),
                finished_at=_utc(finished_at),
                error_message=message,
                upstream_ids=tuple(up for _, up in edges[first_edge:next_edge]),
                display_state=state,
                waiting_for_pool=pool,
            )
        )
    return found


def _attempt_edges(conn: Connection, attempt_id: int) -> list[tuple[int, int]]:
    """``(downstream_id, upstream_id)`` of every edge of an attempt's tasks, in that order.
    The range of the attempt's task ids bounds the scan of ix_task_dependencies_downstream
    (as in :func:`_upstream_ids`)."""
    own = tasks.alias("own")
    first = select(func.min(own.c.id)).where(own.c.attempt_id == attempt_id).scalar_subquery()
    last = select(func.max(own.c.id)).where(own.c.attempt_id == attempt_id).scalar_subquery()
    query = (
        select(task_dependencies.c.downstream_id, task_dependencies.c.upstream_id)
        .join(tasks, tasks.c.id == task_dependencies.c.downstream_id)
        .where(
            tasks.c.attempt_id == attempt_id,
            task_dependencies.c.downstream_id.between(first, last),
        )
        .order_by(task_dependencies.c.downstream_id, task_dependencies.c.upstream_id)
    )
    return [(int(down), int(up)) for down, up in conn.execute(query)]


def _utc(moment: datetime | None) -> datetime | None:
    """An aware time as it is; a naive one (SQLite's) as UTC."""
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=UTC)


def _upstream_ids(conn: Connection, attempt_id: int, task_ids: list[int]) -> dict[int, list[int]]:
    """The ids each task of an attempt waits for. The range of the attempt's own task ids
    bounds the scan of ix_task_dependencies_downstream: without it PostgreSQL reads every
    attempt's edges for a large attempt (35 ms for 2,000 tasks among 200,000 edges)."""
    if not task_ids:
        return {}
    edges = conn.execute(
        select(task_dependencies.c.downstream_id, task_dependencies.c.upstream_id)
        .join(tasks, tasks.c.id == task_dependencies.c.downstream_id)
        .where(
            tasks.c.attempt_id == attempt_id,
            task_dependencies.c.downstream_id.between(min(task_ids), max(task_ids)),
        )
        .order_by(task_dependencies.c.upstream_id)
    )
    upstreams: dict[int, list[int]] = {}
    for edge in edges:
        upstreams.setdefault(int(edge.downstream_id), []).append(int(edge.upstream_id))
    return upstreams


def _own_name(task: TaskRow, full_names: dict[int, str]) -> str:
    """A task's full name without its parent's; a root task's full name."""
    parent = None if task.parent_id is None else full_names.get(task.parent_id)
    return _name_within(task.full_name, parent)


def _name_within(full_name: str, parent: str | None) -> str:
    """``full_name`` without its parent's full name ``parent`` (whole if there is none)."""
    if parent and full_name.startswith(parent) and full_name != parent:
        return full_name[len(parent) :]
    return full_name
