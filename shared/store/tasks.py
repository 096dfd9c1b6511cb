"""Task rows, their dependencies and log index: the queries the executor runs."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import (
    Connection,
    Float,
    Text,
    bindparam,
    case,
    column,
    exists,
    func,
    literal,
    null,
    or_,
    select,
    true,
    tuple_,
    union_all,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import aliased
from sqlalchemy.sql import Update
from sqlalchemy.sql.elements import BindParameter

from tickwork.shared.domain.choices import parse_choice
from tickwork.shared.domain.pools import PRIORITY_STEP_SECONDS, rank_seconds
from tickwork.shared.domain.states import TERMINAL_TASK_STATES, TaskState
from tickwork.shared.errors import NotFound
from tickwork.shared.store.dialects import (
    StoreDialect,
    TableQualified,
    dialect_named,
    dialect_of,
    fixed,
    postgres_upsert_from,
)
from tickwork.shared.store.logs import (
    LOG_CHANNEL,
    chunk_upsert_postgres,
    chunk_values,
    log_notices,
)
from tickwork.shared.store.partitions import AttemptFilter, AttemptSet, restrict
from tickwork.shared.store.sql import insert_rows
from tickwork.shared.store.tables import task_dependencies, task_logs, tasks


@dataclass(frozen=True)
class TaskRow:
    """One task of an attempt as stored."""

    id: int
    attempt_id: int
    parent_id: int | None
    full_name: str
    position: int
    is_group: bool
    is_generated: bool
    state: TaskState
    config: dict[str, Any]
    inherited_export: dict[str, Any] | None
    retry_count: int
    lease_token: int
    lost_count: int
    not_before: datetime | None
    params: dict[str, Any] | None
    result: dict[str, Any] | None
    output_params: dict[str, Any] | None
    error: dict[str, Any] | None
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime
    pool: str | None = None  # the pool whose slot it takes in flight (_pool)
    priority: int = 0  # _priority
    ready_rank: float | None = None  # while READY: handed out lowest first

    @property
    def rank(self) -> float:
        """Its place among ready tasks, lowest handed out first (see
        :mod:`tickwork.shared.domain.pools`); a task ready from before ranks existed is 0."""
        return self.ready_rank if self.ready_rank is not None else 0.0


_TASK_COLUMNS = tuple(tasks.c[name] for name in TaskRow.__dataclass_fields__)


# Hot statements are built once; SQLAlchemy then reuses their compiled form.
_BY_ID = select(*_TASK_COLUMNS).where(tasks.c.id == bindparam("task_id"))
_UPSTREAM = aliased(tasks, name="upstream")
_STATES: BindParameter[str] = bindparam("states", expanding=True)
_HAS_CHILD_IN = select(
    exists().where(tasks.c.parent_id == bindparam("parent_id"), tasks.c.state.in_(_STATES))
)
# A task made READY: its ready time less its priority's head start (shared.domain.pools).
_READY_RANK = bindparam("rank_now", type_=Float) - tasks.c.priority * fixed(PRIORITY_STEP_SECONDS)
# The "start" key of a task's config is its _delay/_start_at (TaskSpec.to_config).
_HAS_NO_START_RULE = tasks.c.config["start"].as_string().is_(None)


def _task_from_row(row: Any) -> TaskRow:
    return _task_from_values(dict(row._mapping))


def _task_from_values(values: dict[str, Any]) -> TaskRow:
    values["state"] = parse_choice(TaskState, values["state"], f"state of task {values['id']}")
    return TaskRow(**values)


def _states(states: Iterable[TaskState]) -> list[str]:
    return [s.value for s in states]


def insert_tasks(conn: Connection, rows: Sequence[dict[str, Any]]) -> list[int]:
    """Insert task rows (every column but the id) and return their ids in the same order."""
    if not rows:
        return []
    # One statement for all rows (unnest on PostgreSQL); full names are unique within
    # an attempt, so they give each id its row.
    inserted = insert_rows(conn, tasks, rows, (tasks.c.id, tasks.c.attempt_id, tasks.c.full_name))
    ids = {(int(row.attempt_id), str(row.full_name)): int(row.id) for row in inserted}
    return [ids[(int(row["attempt_id"]), str(row["full_name"]))] for row in rows]


def insert_dependencies(conn: Connection, edges: Sequence[tuple[int, int]]) -> None:
    """Insert ``(upstream_id, downstream_id)`` edges."""
    if edges:
        conn.execute(
            task_dependencies.insert(),
            [{"upstream_id": up, "downstream_id": down} for up, down in edges],
        )


def find_task(conn: Connection, task_id: int) -> TaskRow | None:
    """One task by id, or None if it no longer exists (a retry deleted it)."""
    row = conn.execute(_BY_ID, {"task_id": task_id}).one_or_none()
    return None if row is None else _task_from_row(row)


def get_task(conn: Connection, task_id: int) -> TaskRow:
    """One task by id; raises NotFound if there is none."""
    task = find_task(conn, task_id)
    if task is None:
        raise NotFound(f"no task {task_id}")
    return task


_IDS: BindParameter[int] = bindparam("ids", expanding=True)
_RUNS: BindParameter[Any] = bindparam("runs", expanding=True)
_IN_RUNS = tuple_(tasks.c.id, tasks.c.lease_token).in_(_RUNS)
_MARK_MANY_RUNNING = (
    tasks.update()
    .where(tasks.c.id.in_(_IDS), _IN_RUNS, tasks.c.state == TaskState.QUEUED.value)
    .values(state=TaskState.RUNNING.value, updated_at=bindparam("now"))
    .returning(tasks.c.id, tasks.c.full_name)
)


def mark_tasks_running(
    conn: Connection, runs: Sequence[tuple[int, int]], now: datetime
) -> dict[int, str]:
    """QUEUED -> RUNNING for many ``(task id, lease token)`` runs in one statement, each
    only under its own token; ``{task id: full name}`` of those that moved."""
    if not runs:
        return {}
    values = {"ids": [i for i, _ in runs], "runs": list(runs), "now": now}
    return {int(row.id): str(row.full_name) for row in conn.execute(_MARK_MANY_RUNNING, values)}


# A run ends only while it is in flight: a task a retry sent back to BLOCKED or READY keeps
# its lease token, and a late result of its old run must not end it.
_IN_FLIGHT = [TaskState.QUEUED.value, TaskState.RUNNING.value]
_JSON_NONE = fixed("null")  # JSON's null, as a bound None of a JSON column is stored


@lru_cache(maxsize=4)
def _succeed_runs_of(dialect: StoreDialect) -> Update:
    """The UPDATE of :func:`succeed_runs` on ``dialect``: built once, its text the same
    for any number of runs (see :meth:`StoreDialect.in_bound_ids`)."""
    return (
        tasks.update()
        .where(
            dialect.in_bound_ids(tasks.c.id, "ids"),
            dialect.in_bound_pairs((tasks.c.id, tasks.c.lease_token), "runs"),
            # In a function: no planner (SQLite's would) reads the state index instead of
            # the ids.
            func.coalesce(tasks.c.state, fixed("")).in_([fixed(state) for state in _IN_FLIGHT]),
        )
        .values(
            state=fixed(TaskState.SUCCESS.value),
            result=_JSON_NONE,
            output_params=case(
                (dialect.in_bound_ids(tasks.c.id, "passing_ids"), tasks.c.params),
                else_=_JSON_NONE,
            ),
            finished_at=bindparam("now"),
            updated_at=bindparam("now"),
        )
        .returning(tasks.c.id)
    )


_FAIL_RUNS = (
    tasks.update()
    .where(tasks.c.id.in_(_IDS), _IN_RUNS, tasks.c.state.in_(_IN_FLIGHT))
    .values(
        state=TaskState.ERROR.value,
        error=bindparam("error", type_=tasks.c.error.type),
        finished_at=bindparam("now"),
        updated_at=bindparam("now"),
    )
    .returning(tasks.c.id)
)


def succeed_runs(
    conn: Connection, runs: Sequence[tuple[int, int]], passing: Collection[int], now: datetime
) -> set[int]:
    """End many runs that stored nothing in SUCCESS in one statement, each fenced by its
    lease token and the in-flight states in the UPDATE itself (whatever the caller read
    before): ``(task id, lease token)`` runs, ``passing`` the ids
    whose params pass on to later tasks as their output (those with non-empty params).
    The ids of the tasks that moved."""
    if not runs:
        return set()
    values = _succeed_values(runs, passing, now)
    statement = _succeed_runs_of(dialect_of(conn))
    return {int(i) for i in conn.execute(statement, values).scalars()}


def _succeed_values(
    runs: Sequence[tuple[int, int]], passing: Collection[int], now: datetime
) -> dict[str, Any]:
    """The parameters of :func:`_succeed_runs_of`, alone or in a statement around it."""
    return {
        "ids": [i for i, _ in runs],
        "runs": list(runs),
        "passing_ids": list(passing) or [0],
        "now": now,
        "rank_now": rank_seconds(now),
    }


def fail_runs(
    conn: Connection, runs: Sequence[tuple[int, int]], error: dict[str, Any], now: datetime
) -> set[int]:
    """End many runs in ERROR with the same ``error`` in one statement, fenced as
    :func:`succeed_runs`; the ids of the tasks that moved."""
    if not runs:
        return set()
    values = {"ids": [i for i, _ in runs], "runs": list(runs), "error": error, "now": now}
    return {int(i) for i in conn.execute(_FAIL_RUNS, values).scalars()}


_BY_IDS = select(*_TASK_COLUMNS).where(tasks.c.id.in_(_IDS)).order_by(tasks.c.id)


def get_tasks(conn: Connection, task_ids: Iterable[int]) -> list[TaskRow]:
    """Tasks by id, in id order."""
    ids = list(task_ids)
    if not ids:
        return []
    return [_task_from_row(row) for row in conn.execute(_BY_IDS, {"ids": ids})]


def list_attempt_tasks(conn: Connection, attempt_id: int) -> list[TaskRow]:
    """Every task of an attempt, in creation order."""
    query = select(*_TASK_COLUMNS).where(tasks.c.attempt_id == attempt_id).order_by(tasks.c.id)
    return [_task_from_row(row) for row in conn.execute(query)]


def list_children(conn: Connection, parent_id: int) -> list[TaskRow]:
    """A task's children in definition order."""
    query = (
        select(*_TASK_COLUMNS)
        .where(tasks.c.parent_id == parent_id)
        .order_by(tasks.c.position, tasks.c.id)
    )
    return [_task_from_row(row) for row in conn.execute(query)]


def select_tasks_due(
    conn: Connection,
    state: TaskState,
    now: datetime,
    limit: int,
    *,
    is_group: bool | None = None,
    attempt_ids: AttemptSet = None,
) -> list[TaskRow]:
    """Tasks in ``state`` whose ``not_before`` has passed, oldest first.

    ``attempt_ids`` keeps the search to those attempts (an embedded run drives only its
    own, an executor those of its partitions).
    """
    values: dict[str, Any] = {"state": state.value, "now": now, "limit": limit}
    if is_group is not None:
        values["is_group"] = is_group
    by_kind = is_group is not None
    return _rows_in(conn, lambda by_ids: _due_query(by_kind, by_ids), values, attempt_ids)


def _rows_in(
    conn: Connection,
    query_for: Callable[[bool], Any],
    values: dict[str, Any],
    attempt_ids: AttemptSet,
) -> list[TaskRow]:
    """The rows of ``query_for(by_ids)`` (a cached statement) kept to ``attempt_ids``: a
    set of ids is bound as ``attempt_ids``, a partition filter added as a clause."""
    by_ids = attempt_ids is not None and not isinstance(attempt_ids, AttemptFilter)
    if by_ids:
        values = {**values, "attempt_ids": list(attempt_ids)}  # type: ignore[arg-type]
    query = query_for(by_ids)
    if isinstance(attempt_ids, AttemptFilter):
        query = restrict(query, tasks.c.attempt_id, attempt_ids)
    return [_task_from_row(row) for row in conn.execute(query, values)]


_DUE_BY_NOW = tasks.c.not_before.is_(None) | (tasks.c.not_before <= bindparam("now"))
"""A task without a ``not_before``, or whose ``not_before`` has passed by ``now``."""


@lru_cache(maxsize=8)
def _due_query(by_kind: bool, by_attempt: bool) -> Any:
    query = select(*_TASK_COLUMNS).where(
        tasks.c.state == bindparam("state"),
        _DUE_BY_NOW,
    )
    if by_kind:
        query = query.where(tasks.c.is_group == bindparam("is_group"))
    if by_attempt:
        query = query.where(tasks.c.attempt_id.in_(bindparam("attempt_ids", expanding=True)))
    return query.order_by(tasks.c.id).limit(bindparam("limit"))


def select_ready_operators(
    conn: Connection,
    now: datetime,
    limit: int,
    *,
    pool: str | None = None,
    attempt_ids: AttemptSet = None,
) -> list[TaskRow]:
    """READY operator tasks due by ``now`` in the order they are handed out (lowest
    rank first: see :mod:`tickwork.shared.domain.pools`), of ``attempt_ids``.

    With ``pool`` None, up to ``limit`` tasks of no pool (a pooled task waits for its
    pool's slot, not for a scan). With a ``pool``, those of ``attempt_ids`` among the
    pool's ``limit`` best-ranked ready tasks of any attempt: a slot goes to the best task
    waiting for it, whichever executor runs it."""
    values: dict[str, Any] = {"now": now, "limit": limit, "pool": pool}
    pooled = pool is not None
    return _rows_in(conn, lambda by_ids: _ready_query(pooled, by_ids), values, attempt_ids)


@lru_cache(maxsize=4)
def _ready_query(pooled: bool, by_attempt: bool) -> Any:
    due = (
        tasks.c.state == TaskState.READY.value,
        tasks.c.pool == bindparam("pool") if pooled else tasks.c.pool.is_(None),
        tasks.c.is_group.is_(False),
        _DUE_BY_NOW,
    )
    query = select(*_TASK_COLUMNS)
    if pooled:
        best = select(tasks.c.id).where(*due).order_by(tasks.c.ready_rank, tasks.c.id)
        query = query.where(tasks.c.id.in_(best.limit(bindparam("limit")).scalar_subquery()))
    else:
        query = query.where(*due)
    if by_attempt:
        query = query.where(tasks.c.attempt_id.in_(bindparam("attempt_ids", expanding=True)))
    query = query.order_by(tasks.c.ready_rank, tasks.c.id)
    return query if pooled else query.limit(bindparam("limit"))


def earliest_not_before(
    conn: Connection,
    states: Iterable[TaskState],
    *,
    attempt_ids: AttemptSet = None,
) -> datetime | None:
    """The soonest ``not_before`` among tasks in ``states``: when a waiting task is due."""
    query = select(func.min(tasks.c.not_before)).where(tasks.c.state.in_(_states(states)))
    query = restrict(query, tasks.c.attempt_id, attempt_ids)
    value: datetime | None = conn.execute(query).scalar_one_or_none()
    return value


def update_task(
    conn: Connection,
    task_id: int,
    from_states: Iterable[TaskState],
    *,
    fence: int | None = None,
    **values: Any,
) -> bool:
    """Guarded update of one task: applied only while it is in ``from_states`` and, given
    ``fence``, while that is its lease token (an agent's result: the fencing token)."""
    if "state" in values and isinstance(values["state"], TaskState):
        values["state"] = values["state"].value
    keys = tuple(sorted(values))
    statement = _guarded_update(tuple(_states(from_states)), keys, fence is not None)
    bound = {"b_task_id": task_id, **{f"b_{k}": v for k, v in values.items()}}
    if fence is not None:
        bound["b_fence"] = fence
    return conn.execute(statement, bound).rowcount == 1


@lru_cache(maxsize=256)
def _guarded_update(from_states: tuple[str, ...], keys: tuple[str, ...], fenced: bool) -> Update:
    statement = (
        tasks.update()
        .where(tasks.c.id == bindparam("b_task_id"), tasks.c.state.in_(from_states))
        .values({key: bindparam(f"b_{key}") for key in keys})
    )
    return statement.where(tasks.c.lease_token == bindparam("b_fence")) if fenced else statement


def update_tasks_state(
    conn: Connection,
    task_ids: Sequence[int],
    from_states: Iterable[TaskState],
    state: TaskState,
    now: datetime,
) -> list[tuple[int, bool]]:
    """Move many tasks to ``state``; ``(id, is_group)`` of those that were in ``from_states``."""
    if not task_ids:
        return []
    values = {
        "ids": list(task_ids),
        "from_states": _states(from_states),
        "to_state": state.value,
        "now": now,
        "rank_now": rank_seconds(now),
    }
    return [(int(row.id), bool(row.is_group)) for row in conn.execute(_STATE_UPDATE, values)]


def make_ready(
    conn: Connection,
    task_ids: Sequence[int],
    from_state: TaskState,
    now: datetime,
    *,
    skip_delayed: bool = False,
) -> list[TaskRow]:
    """Move tasks in ``from_state`` to READY; the rows of those that moved, as they are now
    (the executor dispatches them without reading them again). ``skip_delayed`` leaves
    tasks with a ``_delay``/``_start_at`` where they are: their time is worked out first."""
    if not task_ids:
        return []
    values = {
        "ids": list(task_ids),
        "from_state": from_state.value,
        "now": now,
        "rank_now": rank_seconds(now),
    }
    return [_task_from_row(row) for row in conn.execute(_make_ready(skip_delayed), values)]


@lru_cache(maxsize=2)
def _make_ready(skip_delayed: bool) -> Any:
    statement = (
        tasks.update()
        .where(tasks.c.id.in_(_IDS), tasks.c.state == bindparam("from_state"))
        .values(state=TaskState.READY.value, updated_at=bindparam("now"), ready_rank=_READY_RANK)
        .returning(*_TASK_COLUMNS)
    )
    return statement.where(_HAS_NO_START_RULE) if skip_delayed else statement


_STATE_UPDATE = (
    tasks.update()
    .where(
        tasks.c.id.in_(_IDS),
        tasks.c.state.in_(bindparam("from_states", expanding=True)),
    )
    .values(state=bindparam("to_state"), updated_at=bindparam("now"), ready_rank=_READY_RANK)
    .returning(tasks.c.id, tasks.c.is_group)
)


@lru_cache(maxsize=4)
def _mark_queued_of(dialect: StoreDialect) -> Update:
    """The UPDATE of :func:`mark_tasks_queued` on ``dialect``, built once."""
    return (
        tasks.update()
        .where(
            dialect.in_bound_ids(tasks.c.id, "ids"),
            func.coalesce(tasks.c.state, fixed("")) == fixed(TaskState.READY.value),  # the ids
        )
        .values(
            state=fixed(TaskState.QUEUED.value),
            lease_token=tasks.c.lease_token + fixed(1),
            params=bindparam("params", type_=tasks.c.params.type),
            started_at=func.coalesce(
                tasks.c.started_at, bindparam("now", type_=tasks.c.started_at.type)
            ),
            updated_at=bindparam("now", type_=tasks.c.updated_at.type),
        )
        .returning(tasks.c.id, tasks.c.lease_token)
    )


def mark_tasks_queued(
    conn: Connection, params_by_id: dict[int, dict[str, Any] | None], now: datetime
) -> dict[int, int]:
    """READY -> QUEUED under a new lease token each; returns ``{task_id: lease_token}``.

    The token is the fencing token: it only grows, so a result carrying an older one is
    refused. ``params`` records the stored params the task started with; tasks that start
    with the same params (siblings of one group, typically) are updated together.
    """
    return mark_tasks_queued_logging(conn, params_by_id, now, LogRows([], []))[0]


@dataclass(frozen=True)
class LogRows:
    """What a pass writes of logs: rows of the log index (see :func:`write_task_logs`),
    ``started``, of runs about to start, and ``ended``, of runs whose results came; the
    ``chunks`` of their text agents streamed (rows of
    :func:`~tickwork.shared.store.logs.chunk_rows`); and the attempts whose log followers
    are to be told (``grown``, see :func:`~tickwork.shared.store.logs.notify_log_readers`)."""

    started: list[dict[str, Any]]
    ended: list[dict[str, Any]]
    chunks: Sequence[dict[str, Any]] = ()
    grown: Sequence[int] = ()

    def __bool__(self) -> bool:
        return bool(self.started or self.ended or self.chunks or self.grown)


def mark_tasks_queued_logging(
    conn: Connection,
    params_by_id: dict[int, dict[str, Any] | None],
    now: datetime,
    logs: LogRows,
) -> tuple[dict[int, int], LogRows]:
    """:func:`mark_tasks_queued`, writing ``logs`` with it where the dialect can (in the
    same statements, on PostgreSQL): each started row once its task is QUEUED under the
    row's token; the ended rows, the chunks and the notices in any case, with the first
    statement. The tokens, and what is left to write (to :func:`write_task_logs` and the
    log writers): all of it where the dialect cannot, else the started rows whose task
    was not queued under their token."""
    groups: dict[str, tuple[dict[str, Any] | None, list[int]]] = {}
    for task_id, params in params_by_id.items():
        key = json.dumps(params, sort_keys=True, default=str)
        groups.setdefault(key, (params, []))[1].append(task_id)
    dialect = dialect_of(conn)
    folded = dialect.chains_inserts and bool(logs)
    started = {row["task_id"]: row for row in logs.started} if folded else {}
    rest = dataclasses.replace(logs, started=[]) if folded else LogRows([], [])
    tokens: dict[int, int] = {}
    for params, ids in groups.values():
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            values: dict[str, Any] = {"ids": chunk, "params": params, "now": now}
            statement = _mark_queued_of(dialect)
            chunk_started = [started[i] for i in chunk if i in started]
            if chunk_started or rest:
                values |= _logging_values(dataclasses.replace(rest, started=chunk_started))
                statement, rest = _MARK_QUEUED_LOGGING, LogRows([], [])  # written with it
            for row in conn.execute(statement, values):
                if row.id is not None:  # none queued: the statement's one row, for its notices
                    tokens[int(row.id)] = int(row.lease_token)
    if not folded:
        return tokens, logs
    left = [row for row in logs.started if tokens.get(row["task_id"]) != row["lease_token"]]
    return tokens, dataclasses.replace(rest, started=left)


IN_FLIGHT_STATES = (TaskState.QUEUED, TaskState.RUNNING)


@dataclass(frozen=True)
class InFlightRun:
    """What the reaper needs first of an in-flight task: which run it is in, and how."""

    id: int
    state: TaskState
    lease_token: int


def select_in_flight(
    conn: Connection,
    updated_before: datetime,
    limit: int,
    *,
    attempt_ids: AttemptSet = None,
) -> list[InFlightRun]:
    """QUEUED and RUNNING tasks unchanged since ``updated_before``, oldest first: those the
    reaper checks for a lost message or a lost agent. Read from the old end of
    ``ix_tasks_state_updated_at``: tasks changed since cost nothing."""
    query = select(tasks.c.id, tasks.c.state, tasks.c.lease_token).where(
        tasks.c.state.in_(_states(IN_FLIGHT_STATES)), tasks.c.updated_at <= updated_before
    )
    query = restrict(query, tasks.c.attempt_id, attempt_ids)
    query = query.order_by(tasks.c.updated_at, tasks.c.id).limit(limit)
    return [
        InFlightRun(int(row.id), TaskState(row.state), int(row.lease_token))
        for row in conn.execute(query)
    ]


def requeue_task(
    conn: Connection, task_id: int, lease_token: int, now: datetime, *, lost: bool
) -> int | None:
    """QUEUED/RUNNING under ``lease_token`` -> QUEUED under the next token; the new token,
    or None if the task moved on meanwhile. ``lost`` counts the run as a lost lease."""
    statement = (
        tasks.update()
        .where(
            tasks.c.id == task_id,
            tasks.c.lease_token == lease_token,
            tasks.c.state.in_(_states(IN_FLIGHT_STATES)),
        )
        .values(
            state=TaskState.QUEUED.value,
            lease_token=tasks.c.lease_token + 1,
            lost_count=tasks.c.lost_count + (1 if lost else 0),
            updated_at=now,
        )
        .returning(tasks.c.lease_token)
    )
    token = conn.execute(statement).scalar_one_or_none()
    return None if token is None else int(token)


def touch_tasks(conn: Connection, task_ids: Sequence[int], now: datetime) -> None:
    """Mark tasks as just looked at, so the reaper leaves them alone for a while."""
    for start in range(0, len(task_ids), 500):
        conn.execute(
            tasks.update()
            .where(tasks.c.id.in_(list(task_ids[start : start + 500])))
            .values(updated_at=now)
        )


def in_flight_of_attempt(conn: Connection, attempt_id: int) -> list[tuple[int, int]]:
    """``(task id, lease token)`` of an attempt's QUEUED and RUNNING tasks."""
    query = select(tasks.c.id, tasks.c.lease_token).where(
        tasks.c.attempt_id == attempt_id, tasks.c.state.in_(_states(IN_FLIGHT_STATES))
    )
    return [(int(row.id), int(row.lease_token)) for row in conn.execute(query)]


def count_in_flight(conn: Connection) -> dict[str, int]:
    """How many tasks are QUEUED and how many RUNNING."""
    query = (
        select(tasks.c.state, func.count().label("task_count"))
        .where(tasks.c.state.in_(_states(IN_FLIGHT_STATES)))
        .group_by(tasks.c.state)
    )
    counts = {state.value: 0 for state in IN_FLIGHT_STATES}
    counts.update({str(row.state): int(row.task_count) for row in conn.execute(query)})
    return counts


def cancel_unfinished_tasks(conn: Connection, attempt_id: int, now: datetime) -> int:
    """End every task of an attempt that has not ended, as CANCELED; how many there were."""
    result = conn.execute(
        tasks.update()
        .where(
            tasks.c.attempt_id == attempt_id,
            tasks.c.state.not_in(_states(TERMINAL_TASK_STATES)),
        )
        .values(state=TaskState.CANCELED.value, finished_at=now, updated_at=now)
    )
    return int(result.rowcount)


def _all_upstreams_succeeded() -> Any:
    return ~exists().where(
        task_dependencies.c.downstream_id == tasks.c.id,
        _UPSTREAM.c.id == task_dependencies.c.upstream_id,
        _UPSTREAM.c.state != fixed(TaskState.SUCCESS.value),
    )


_EDGE = aliased(task_dependencies, name="edge")
# Driven from the edges of the task that ended (their primary key), so the cost does not
# grow with the number of blocked tasks in the attempt: the state is wrapped in a function
# so that no planner (SQLite's would) scans the state index instead.
_STARTABLE_DOWNSTREAM = (
    select(tasks.c.id)
    .select_from(_EDGE.join(tasks, tasks.c.id == _EDGE.c.downstream_id))
    .where(
        _EDGE.c.upstream_id == bindparam("task_id"),
        func.coalesce(tasks.c.state, "") == TaskState.BLOCKED.value,
        _all_upstreams_succeeded(),
    )
)


def _make_downstream_ready_of(dialect: StoreDialect) -> Update:
    """BLOCKED tasks waiting for the tasks of the bound ``ids`` whose upstreams all
    succeeded -> READY, on ``dialect``."""
    waited_for = dialect.in_bound_ids(_EDGE.c.upstream_id, "ids")
    return (
        tasks.update()
        .where(
            tasks.c.id.in_(select(_EDGE.c.downstream_id).where(waited_for)),
            func.coalesce(tasks.c.state, fixed("")) == fixed(TaskState.BLOCKED.value),
            _all_upstreams_succeeded(),
        )
        .values(
            state=fixed(TaskState.READY.value), updated_at=bindparam("now"), ready_rank=_READY_RANK
        )
        .returning(*_TASK_COLUMNS)
    )


@dataclass(frozen=True)
class Seen:
    """What a task sees of the tasks before it: what its parent passes on (its
    ``output_params``, or its ``params`` while it has none) and the non-empty
    ``output_params`` of its upstreams, in definition order."""

    parent: dict[str, Any] | None
    upstream: list[dict[str, Any]]


_PARENT = aliased(tasks, name="parent")
_SEEN_EDGE = aliased(task_dependencies, name="seen_edge")
_SEEN_UPSTREAM = aliased(tasks, name="seen_upstream")


def _seen_columns(dialect: StoreDialect, ended: Any | None = None) -> list[Any]:
    """What a task being made READY sees, as columns of its RETURNING: its parent's
    output and params and its upstreams' outputs in definition order (read with
    :func:`_ready_and_seen`); with ``ended`` (the runs the same statement ends, on
    PostgreSQL), those upstreams' outputs as that statement leaves them, not as its
    snapshot has them. Nothing such a statement changes is among what it reads: a task
    made READY is neither a parent nor an upstream of another it makes READY."""
    output: Any = _SEEN_UPSTREAM.c.output_params
    joined: Any = _SEEN_UPSTREAM
    if ended is not None:
        output = case((ended.c.id.is_not(None), ended.c.output_params), else_=output)
        joined = joined.outerjoin(ended, ended.c.id == _SEEN_UPSTREAM.c.id)
    upstreams = (  # of the task the statement makes READY: two levels down, named so
        select(_SEEN_EDGE.c.upstream_id)
        .where(_SEEN_EDGE.c.downstream_id == tasks.c.id)
        .correlate(tasks)
    )
    parent = select(_PARENT.c.output_params, _PARENT.c.params).where(
        _PARENT.c.id == tasks.c.parent_id
    )
    in_order = dialect.json_list_in_order(output, [_SEEN_UPSTREAM.c.position, _SEEN_UPSTREAM.c.id])
    upstream = (
        select(in_order)
        .select_from(joined)
        .where(dialect.in_selected_ids(_SEEN_UPSTREAM.c.id, upstreams), output.is_not(None))
        .scalar_subquery()
    )
    return [
        TableQualified(parent.with_only_columns(_PARENT.c.output_params).scalar_subquery()).label(
            "parent_output"
        ),
        TableQualified(parent.with_only_columns(_PARENT.c.params).scalar_subquery()).label(
            "parent_params"
        ),
        TableQualified(upstream).label("upstream_outputs"),
    ]


def _ready_and_seen(
    dialect: StoreDialect, rows: Iterable[dict[str, Any]]
) -> tuple[list[TaskRow], dict[int, Seen]]:
    """The tasks and what each sees, from rows of their columns and :func:`_seen_columns`."""
    ready: list[TaskRow] = []
    seen: dict[int, Seen] = {}
    for columns in rows:
        parent_output, parent_params = columns.pop("parent_output"), columns.pop("parent_params")
        found = dialect.read_json_list(columns.pop("upstream_outputs"))
        upstream = [output for output in found if output]
        task = _task_from_values(columns)
        ready.append(task)
        seen[task.id] = Seen(parent_output or parent_params, upstream)
    return ready, seen


@lru_cache(maxsize=4)
def _make_downstream_ready_seeing(dialect: StoreDialect) -> Update:
    """:func:`_make_downstream_ready_of`, also saying what each task it makes READY sees."""
    return _make_downstream_ready_of(dialect).returning(*_seen_columns(dialect))


def make_downstream_ready(
    conn: Connection, task_ids: Sequence[int], now: datetime
) -> tuple[list[TaskRow], dict[int, Seen]]:
    """BLOCKED tasks that wait for any of ``task_ids`` and whose upstreams all succeeded
    -> READY, in one statement; their rows as they are now. Those with a start rule
    (``_delay``/``_start_at``) are READY too: the caller works out their time. The same
    statement says what each sees (as :func:`parent_and_upstream_outputs` would), by id:
    a chain's next task costs no read before it is queued."""
    if not task_ids:
        return [], {}
    values = {"ids": list(task_ids), "now": now, "rank_now": rank_seconds(now)}
    dialect = dialect_of(conn)
    rows = conn.execute(_make_downstream_ready_seeing(dialect), values)
    return _ready_and_seen(dialect, (dict(row._mapping) for row in rows))


# One statement that ends runs in SUCCESS and makes READY what waited for them (where the
# caller says tasks may wait), for PostgreSQL: each part of a data-modifying WITH sees the
# snapshot the statement began with, so the promotion counts the runs it ends as
# succeeded and reads their outputs from what ends them. Its one row at least carries the
# ids that moved; each READY task adds a row.
_POSTGRESQL = dialect_named("postgresql")
_ENDED = _succeed_runs_of(_POSTGRESQL).returning(tasks.c.output_params).cte("ended")
_PROMOTED = (
    tasks.update()
    .where(
        # Of the tasks waiting for the runs it ends only (on a new store, it scanned
        # every task and the upstreams of each BLOCKED one, a link of a long chain the
        # longer the more tasks were left).
        _POSTGRESQL.in_selected_ids(
            tasks.c.id,
            select(_EDGE.c.downstream_id).where(
                _EDGE.c.upstream_id.in_(
                    select(_ENDED.c.id).where(_ENDED.c.id.in_(bindparam("looked", expanding=True)))
                )
            ),
        ),
        func.coalesce(tasks.c.state, fixed("")) == fixed(TaskState.BLOCKED.value),
        ~exists().where(
            task_dependencies.c.downstream_id == tasks.c.id,
            _UPSTREAM.c.id == task_dependencies.c.upstream_id,
            _UPSTREAM.c.state != fixed(TaskState.SUCCESS.value),
            _UPSTREAM.c.id.not_in(select(_ENDED.c.id)),
        ),
    )
    .values(state=fixed(TaskState.READY.value), updated_at=bindparam("now"), ready_rank=_READY_RANK)
    .returning(*_TASK_COLUMNS, *_seen_columns(_POSTGRESQL, _ENDED))
    .cte("promoted")
)
_ONE_ROW = select(literal(1).label("one")).subquery("one_row")
_SUCCEED_RUNS_PROMOTING = select(
    select(func.array_agg(_ENDED.c.id)).scalar_subquery().label("moved"),
    *(column.label(column.name) for column in _PROMOTED.c),
).select_from(_ONE_ROW.outerjoin(_PROMOTED, true()))


def succeed_runs_promoting(
    conn: Connection,
    runs: Sequence[tuple[int, int]],
    passing: Collection[int],
    looked: Collection[int],
    now: datetime,
) -> tuple[set[int], list[TaskRow], dict[int, Seen]]:
    """:func:`succeed_runs`, then :func:`make_downstream_ready` for those of ``looked``
    that moved, in one statement where the dialect can (PostgreSQL), in two elsewhere:
    the ids that moved, the tasks made READY and what each of them sees."""
    if not runs:
        return set(), [], {}
    dialect = dialect_of(conn)
    if not (looked and dialect.chains_inserts):
        moved = succeed_runs(conn, runs, passing, now)
        ready, seen = make_downstream_ready(conn, [i for i in looked if i in moved], now)
        return moved, ready, seen
    values = {**_succeed_values(runs, passing, now), "looked": list(looked)}
    ended: set[int] = set()
    promoted: list[dict[str, Any]] = []
    for row in conn.execute(_SUCCEED_RUNS_PROMOTING, values):
        columns = dict(row._mapping)
        ended.update(int(i) for i in columns.pop("moved") or ())
        if columns["id"] is not None:
            promoted.append(columns)
    ready, seen = _ready_and_seen(dialect, promoted)
    return ended, ready, seen


def startable_downstream(conn: Connection, task_id: int) -> list[int]:
    """The BLOCKED tasks that wait for ``task_id`` and whose upstreams all succeeded."""
    return [int(i) for i in conn.execute(_STARTABLE_DOWNSTREAM, {"task_id": task_id}).scalars()]


def select_startable_children(conn: Connection, parent_id: int, limit: int | None) -> list[int]:
    """BLOCKED children of a task whose upstreams all succeeded, in definition order."""
    query = (
        select(tasks.c.id)
        .where(
            tasks.c.parent_id == parent_id,
            tasks.c.state == TaskState.BLOCKED.value,
            _all_upstreams_succeeded(),
        )
        .order_by(tasks.c.position)
    )
    if limit is not None:
        query = query.limit(limit)
    return [int(i) for i in conn.execute(query).scalars()]


def select_blocked_children(conn: Connection, parent_id: int) -> list[tuple[int, bool]]:
    """``(id, startable)`` of a task's BLOCKED children in definition order: startable
    when their upstreams all succeeded."""
    startable = case((_all_upstreams_succeeded(), True), else_=False)
    query = (
        select(tasks.c.id, startable)
        .where(tasks.c.parent_id == parent_id, tasks.c.state == TaskState.BLOCKED.value)
        .order_by(tasks.c.position)
    )
    return [(int(task_id), bool(ok)) for task_id, ok in conn.execute(query)]


def count_attempt_tasks(conn: Connection, attempt_id: int) -> int:
    """How many tasks an attempt has."""
    query = select(func.count()).where(tasks.c.attempt_id == attempt_id)
    return int(conn.execute(query).scalar_one())


def count_children(conn: Connection, parent_id: int) -> int:
    """How many children a task has."""
    query = select(func.count()).where(tasks.c.parent_id == parent_id)
    return int(conn.execute(query).scalar_one())


def count_children_in(conn: Connection, parent_id: int, states: Iterable[TaskState]) -> int:
    """How many children of a task are in ``states``."""
    query = select(func.count()).where(
        tasks.c.parent_id == parent_id, tasks.c.state.in_(_states(states))
    )
    return int(conn.execute(query).scalar_one())


def has_child_in(conn: Connection, parent_id: int, states: Iterable[TaskState]) -> bool:
    """Whether any child of a task is in ``states`` (an index probe, not a count)."""
    values = {"parent_id": parent_id, "states": _states(states)}
    return bool(conn.execute(_HAS_CHILD_IN, values).scalar())


_PARENT_IDS: BindParameter[int] = bindparam("parent_ids", expanding=True)
_PARENTS_AND_UPSTREAMS = union_all(
    select(
        fixed(0).label("kind"),
        tasks.c.id.label("key"),
        tasks.c.output_params,
        tasks.c.params,
        fixed(0).label("place"),
        tasks.c.id.label("source"),
    ).where(tasks.c.id.in_(_PARENT_IDS)),
    select(
        fixed(1),
        task_dependencies.c.downstream_id,
        _UPSTREAM.c.output_params,
        null(),
        _UPSTREAM.c.position,
        _UPSTREAM.c.id,
    )
    .join(_UPSTREAM, _UPSTREAM.c.id == task_dependencies.c.upstream_id)
    .where(task_dependencies.c.downstream_id.in_(_IDS), _UPSTREAM.c.output_params.is_not(None)),
).order_by("kind", "place", "source")


def parent_and_upstream_outputs(
    conn: Connection, parent_ids: Iterable[int], task_ids: Sequence[int]
) -> tuple[dict[int, dict[str, Any] | None], dict[int, list[dict[str, Any]]]]:
    """In one statement: what each parent passes on (its ``output_params``, or its
    ``params`` while it has none) and, for each task, the non-empty ``output_params`` of
    its upstreams in definition order."""
    parents: dict[int, dict[str, Any] | None] = {}
    upstream: dict[int, list[dict[str, Any]]] = {}
    values = {"parent_ids": list(parent_ids), "ids": list(task_ids)}
    for row in conn.execute(_PARENTS_AND_UPSTREAMS, values):
        if row.kind == 0:
            parents[int(row.key)] = row.output_params or row.params
        elif row.output_params:
            upstream.setdefault(int(row.key), []).append(row.output_params)
    return parents, upstream


def descendant_ids_query(task_id: int) -> Any:
    """A recursive CTE of every descendant id of a task (not the task itself)."""
    tree = select(tasks.c.id).where(tasks.c.parent_id == task_id).cte(recursive=True)
    child = aliased(tasks)
    return tree.union_all(select(child.c.id).where(child.c.parent_id == tree.c.id))


def reset_descendants(conn: Connection, task_id: int, now: datetime) -> list[int]:
    """Before a retry: drop generated descendants and return the static ones to BLOCKED.

    A descendant is static when every task between it and the retried one is a plain group
    and it is one of its group's written ``+children``, generated or not: the static tree
    of a group that ``call>`` or ``loop>`` generated stays, so the group runs it again.
    Children an operator generated (``^sub``, ``^error``, ``^check`` and the like) are
    dropped, with everything under them; their operator generates them again.

    Lease tokens are kept so they keep growing across retries. The ids of the tasks
    dropped (their log rows go with them).
    """
    doomed_ids = _regenerated_descendants(conn, task_id)
    # Children first, so no row is left pointing at a deleted parent.
    doomed_ids.sort(reverse=True)
    for chunk_start in range(0, len(doomed_ids), 500):
        chunk = doomed_ids[chunk_start : chunk_start + 500]
        conn.execute(
            task_dependencies.delete().where(
                task_dependencies.c.downstream_id.in_(chunk)
                | task_dependencies.c.upstream_id.in_(chunk)
            )
        )
        conn.execute(task_logs.delete().where(task_logs.c.task_id.in_(chunk)))
        conn.execute(tasks.delete().where(tasks.c.id.in_(chunk)))
    remaining = descendant_ids_query(task_id)
    conn.execute(
        tasks.update()
        .where(tasks.c.id.in_(select(remaining.c.id)))
        .values(
            state=TaskState.BLOCKED.value,
            retry_count=0,
            not_before=None,
            params=None,
            result=None,
            output_params=None,
            error=None,
            started_at=None,
            finished_at=None,
            updated_at=now,
        )
    )
    return doomed_ids


def _regenerated_descendants(conn: Connection, task_id: int) -> list[int]:
    """Ids of the descendants of ``task_id`` that a retry drops (see reset_descendants)."""
    descendants = descendant_ids_query(task_id)
    query = select(tasks.c.id, tasks.c.parent_id, tasks.c.full_name, tasks.c.config).where(
        tasks.c.id.in_(select(descendants.c.id))
    )
    rows = conn.execute(query).all()
    root = conn.execute(
        select(tasks.c.id, tasks.c.full_name, tasks.c.config).where(tasks.c.id == task_id)
    ).one()
    children: dict[int, list[Any]] = {}
    for row in rows:
        children.setdefault(int(row.parent_id), []).append(row)
    doomed: list[int] = []
    pending = [(root, False)]
    while pending:
        parent, parent_doomed = pending.pop()
        plain_group = not (parent.config or {}).get("operator")
        for child in children.get(int(parent.id), []):
            written = child.full_name[len(parent.full_name) :].startswith("+")
            child_doomed = parent_doomed or not (plain_group and written)
            if child_doomed:
                doomed.append(int(child.id))
            pending.append((child, child_doomed))
    return doomed


_RUN_KEY = ["task_id", "lease_token"]


_SETTLED_LOG_COLUMNS = ("path", "size_bytes", "truncated_bytes", "ended_at")
_LOG_COLUMNS = ("task_id", "attempt_id", "lease_token", "path", "size_bytes", "created_at")
_LOG_ROW_NAMES = (*_LOG_COLUMNS, "truncated_bytes", "ended_at")


def _queued_and_logged() -> Any:
    """:func:`_mark_queued_of` with an upsert of log rows (given as one JSON array) in the
    same statement, for PostgreSQL: a started row (no ``ended_at``) goes in only
    if its task is queued under the row's token by this statement, an ended row always;
    a row meeting one of the same run sets what :func:`write_task_logs` would (the same
    upsert, from these rows)."""
    queued = _mark_queued_of(_POSTGRESQL).cte("queued")
    columns = [column(name, task_logs.c[name].type) for name in _LOG_ROW_NAMES]
    given = bindparam("log_rows", type_=postgresql.JSON)
    rows = (
        func.json_to_recordset(given)
        .table_valued(*columns)
        .render_derived(name="log_row", with_types=True)
    )
    chosen = select(*rows.c).where(
        or_(
            rows.c.ended_at.is_not(None),
            tuple_(rows.c.task_id, rows.c.lease_token).in_(
                select(queued.c.id, queued.c.lease_token)
            ),
        )
    )
    upsert = postgres_upsert_from(
        task_logs, _LOG_ROW_NAMES, chosen, _RUN_KEY, _SETTLED_LOG_COLUMNS, "ended_at"
    )
    # The notices come from a one-row subquery the queued rows are joined to (a WITH that
    # only reads runs only when read): they are sent whether or not a task was queued,
    # and then that one row has no id.
    grown = func.unnest(bindparam("log_notices", type_=postgresql.ARRAY(Text)))
    notice = grown.table_valued("payload").render_derived(name="notice")
    notified = select(func.count(func.pg_notify(LOG_CHANNEL, notice.c.payload)).label("sent"))
    told = notified.subquery("told")
    return (
        select(queued.c.id, queued.c.lease_token)
        .select_from(told.outerjoin(queued, true()))
        .add_cte(upsert.cte("logged"))
        .add_cte(chunk_upsert_postgres().cte("chunks_stored"))
    )


_MARK_QUEUED_LOGGING = _queued_and_logged()


def write_task_logs(
    conn: Connection, started: Sequence[dict[str, Any]], ended: Sequence[dict[str, Any]]
) -> None:
    """Index and record runs' log files, in one statement (an upsert) for all rows.

    ``started``: the files runs about to start will write, empty so far (``task_id,
    attempt_id, lease_token, path, created_at`` per row); a run already indexed (its
    message published again) keeps its row. ``ended``: the files runs wrote, as their
    results describe them (``task_id, attempt_id, lease_token, path, size_bytes,
    truncated_bytes, created_at``, when the result came); the row indexed when the run
    was dispatched gets the path, size and cut of the stored file and ends, and a run
    without one (dispatched by an executor that did not index runs) gets one. A run in
    both is recorded as ended.
    """
    rows = _log_rows(started, ended)
    if rows:
        dialect_of(conn).upsert_rows(
            conn,
            task_logs,
            rows,
            index_elements=_RUN_KEY,
            updated=_SETTLED_LOG_COLUMNS,
            only_given="ended_at",
        )


def _log_rows(
    started: Sequence[dict[str, Any]], ended: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The log index's rows of ``started`` and ``ended`` runs, all with the same keys
    (:data:`_LOG_ROW_NAMES`); a run in both is recorded as ended."""
    rows: dict[tuple[int, int], dict[str, Any]] = {}
    for row in started:
        rows[row["task_id"], row["lease_token"]] = {
            **{name: row[name] for name in _LOG_COLUMNS if name != "size_bytes"},
            "size_bytes": 0,
            "truncated_bytes": 0,
            "ended_at": None,
        }
    for row in ended:
        rows[row["task_id"], row["lease_token"]] = {
            **{name: row[name] for name in _LOG_COLUMNS},
            "truncated_bytes": row.get("truncated_bytes", 0),
            "ended_at": row["created_at"],
        }
    return list(rows.values())


def _logging_values(logs: LogRows) -> dict[str, Any]:
    """The parameters of :data:`_MARK_QUEUED_LOGGING`'s writes of ``logs``: the log rows
    as one JSON array (a single value to send, where an array per column costs a
    conversion each), times written out for PostgreSQL to read; the chunk rows, an
    array per column as their own statement has them; the attempts to notify."""
    rows = _log_rows(logs.started, logs.ended)
    return {
        "log_rows": [
            {k: v.isoformat() if isinstance(v, datetime) else v for k, v in row.items()}
            for row in rows
        ],
        **chunk_values(logs.chunks),
        "log_notices": log_notices(logs.grown),
    }
