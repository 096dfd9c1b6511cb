"""Starting, retrying and killing attempts by hand: what the REST API asks of the store."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import Connection, bindparam, func, select
from sqlalchemy.orm import aliased

from tickwork.shared.domain.instants import out_of_range
from tickwork.shared.domain.params import merge_params
from tickwork.shared.domain.schedule import ScheduleSpec
from tickwork.shared.domain.states import AttemptState, TaskState
from tickwork.shared.domain.workflow import WorkflowDefinition
from tickwork.shared.errors import Conflict, InvalidInput, NotFound, Problem
from tickwork.shared.store.dialects import dialect_of
from tickwork.shared.store.engine import notify_work
from tickwork.shared.store.history import AttemptView
from tickwork.shared.store.projects import load_workflow_definition
from tickwork.shared.store.sessions import (
    AttemptRow,
    claim_session,
    create_session_with_attempt,
    get_attempt,
    list_session_attempts,
    request_kill,
)
from tickwork.shared.store.sql import insert_ignoring_conflict
from tickwork.shared.store.tables import (
    attempts,
    projects,
    revisions,
    task_dependencies,
    tasks,
    workflow_configs,
    workflow_definitions,
)

MANUAL_ATTEMPT = "manual"
"""The name of an attempt started by ``POST /api/attempts``."""


class RetryMode(StrEnum):
    """What a retry runs again."""

    ALL = "all"  # every task
    FAILED = "failed"  # only the tasks that did not succeed
    FROM = "from"  # a named task and everything after it


@dataclass(frozen=True)
class StartResult:
    """The attempt a start names; ``created`` is False when it already existed.
    ``attempt`` is the new attempt as stored when the start wrote it in one statement
    (PostgreSQL, a new session); None otherwise: read it with ``get_attempt_view``."""

    attempt_id: int
    session_id: int
    created: bool
    attempt: AttemptView | None = None


@dataclass(frozen=True)
class _Target:
    project_id: int
    definition_id: int
    definition: WorkflowDefinition
    default_params: dict[str, Any]


def start_attempt(
    conn: Connection,
    *,
    project: str,
    workflow: str,
    session_time: datetime | None,
    params: dict[str, Any],
    idempotency_key: str | None,
    now: datetime,
    revision: str | None = None,
    attempt_name: str = MANUAL_ATTEMPT,
) -> StartResult:
    """Start a session of the latest revision of ``workflow`` (or of ``revision``) by
    hand (or by a trigger: ``attempt_name``), and wake executors.

    ``session_time`` defaults to now (the last scheduled time for a scheduled workflow); a
    naive one is read in the workflow's time zone. A session that already has an attempt,
    or an ``idempotency_key`` used before, gives the existing attempt with ``created``
    False. Raises NotFound naming the project or workflow that does not exist, and
    InvalidInput naming ``/session_time`` for a time the store cannot hold.
    """
    if idempotency_key is not None:
        existing = _attempt_by_key(conn, idempotency_key)
        if existing is not None:
            return existing
    target = (
        _latest_workflow(conn, project, workflow)
        if revision is None
        else _revision_workflow(conn, project, workflow, revision)
    )
    when = _session_time(target.definition, session_time, now)
    attempt = {
        "name": attempt_name,
        "workflow_definition_id": target.definition_id,
        "timezone": target.definition.timezone,
        "params": merge_params(target.default_params, params),
        "idempotency_key": idempotency_key,
    }
    if dialect_of(conn).chains_inserts:
        created = create_session_with_attempt(
            conn,
            project_id=target.project_id,
            project_name=project,  # the name the project was found by: the same text
            workflow_name=workflow,
            session_time=when,
            attempt=attempt,
            now=now,
        )
        if created is not None:
            return StartResult(created.id, created.session_id, created=True, attempt=created)
        # The session exists, or the key was just taken: the steps below say which.
    session_id, new_session = claim_session(
        conn, project_id=target.project_id, workflow_name=workflow, session_time=when, now=now
    )
    latest = None if new_session else _latest_attempt_id(conn, session_id)
    if latest is not None:
        return StartResult(latest, session_id, created=False)
    attempt_id = insert_ignoring_conflict(
        conn,
        attempts,
        {
            **attempt,
            "session_id": session_id,
            "state": AttemptState.CREATED.value,
            "created_at": now,
        },
    )
    if attempt_id is None:  # a concurrent start won the race: name its attempt
        found = _attempt_by_key(conn, idempotency_key) if idempotency_key else None
        latest = _latest_attempt_id(conn, session_id)
        if found is not None:
            return found
        if latest is None:
            raise Conflict(f"the session of {workflow} at {when.isoformat()} is being started")
        return StartResult(latest, session_id, created=False)
    notify_work(conn)
    return StartResult(attempt_id, session_id, created=True)


def _attempt_by_key(conn: Connection, key: str) -> StartResult | None:
    query = select(attempts.c.id, attempts.c.session_id).where(attempts.c.idempotency_key == key)
    row = conn.execute(query).one_or_none()
    if row is None:
        return None
    return StartResult(attempt_id=int(row.id), session_id=int(row.session_id), created=False)


def _latest_attempt_id(conn: Connection, session_id: int) -> int | None:
    query = select(func.max(attempts.c.id)).where(attempts.c.session_id == session_id)
    found = conn.execute(query).scalar_one_or_none()
    return None if found is None else int(found)


_LATEST_REVISION = aliased(revisions, name="latest_revision")
_TARGET_QUERY = (
    select(
        projects.c.id,
        _LATEST_REVISION.c.id,
        _LATEST_REVISION.c.default_params,
        workflow_definitions.c.id,
        workflow_configs.c.digest,
    )
    .select_from(
        projects.outerjoin(
            _LATEST_REVISION,
            _LATEST_REVISION.c.id
            == select(func.max(revisions.c.id))
            .where(revisions.c.project_id == projects.c.id)
            .scalar_subquery(),
        )
        .outerjoin(
            workflow_definitions,
            (workflow_definitions.c.revision_id == _LATEST_REVISION.c.id)
            & (workflow_definitions.c.name == bindparam("workflow")),
        )
        .outerjoin(workflow_configs, workflow_configs.c.id == workflow_definitions.c.config_id)
    )
    .where(projects.c.name == bindparam("project"), projects.c.deleted_at.is_(None))
)
"""A live project's id, its latest revision (id and default params), and that revision's
definition of a workflow (id and config digest): one statement, made once."""


def _latest_workflow(conn: Connection, project: str, workflow: str) -> _Target:
    """The definition of ``workflow`` in the latest revision of a live ``project``."""
    row = conn.execute(_TARGET_QUERY, {"project": project, "workflow": workflow}).first()
    if row is None:
        raise NotFound(f"no project {project!r}")
    project_id, revision_id, default_params, definition_id, digest = row
    if revision_id is None or definition_id is None:
        raise NotFound(f"no workflow {workflow!r} in project {project!r}")
    return _Target(
        project_id=int(project_id),
        definition_id=int(definition_id),
        definition=_definition(conn, int(definition_id), digest),
        default_params=dict(default_params or {}),
    )


def _revision_workflow(conn: Connection, project: str, workflow: str, revision: str) -> _Target:
    """The definition of ``workflow`` in revision ``revision`` of a live ``project``;
    NotFound naming the project, the revision or the workflow that does not exist, and
    InvalidInput naming ``/revision`` for a revision that does not exist."""
    row = conn.execute(
        select(projects.c.id).where(projects.c.name == project, projects.c.deleted_at.is_(None))
    ).first()
    if row is None:
        raise NotFound(f"no project {project!r}")
    found = conn.execute(
        select(
            revisions.c.default_params,
            workflow_definitions.c.id,
            workflow_configs.c.digest,
        )
        .select_from(revisions)
        .outerjoin(
            workflow_definitions,
            (workflow_definitions.c.revision_id == revisions.c.id)
            & (workflow_definitions.c.name == workflow),
        )
        .outerjoin(workflow_configs, workflow_configs.c.id == workflow_definitions.c.config_id)
        .where(revisions.c.project_id == row.id, revisions.c.name == revision)
    ).first()
    if found is None:
        message = f"project {project!r} has no revision {revision!r}"
        raise InvalidInput([Problem("/revision", None, message)])
    default_params, definition_id, digest = found
    if definition_id is None:
        raise NotFound(f"no workflow {workflow!r} in revision {revision!r} of {project!r}")
    return _Target(
        project_id=int(row.id),
        definition_id=int(definition_id),
        definition=_definition(conn, int(definition_id), digest),
        default_params=dict(default_params or {}),
    )


_DEFINITIONS: dict[str, WorkflowDefinition] = {}
_MAX_DEFINITIONS = 256


def _definition(conn: Connection, definition_id: int, digest: str) -> WorkflowDefinition:
    """The parsed workflow of a definition whose config has ``digest``: parsed once per
    config, since a config's digest names its content (the same in every database)."""
    found = _DEFINITIONS.get(digest)
    if found is None:
        found = load_workflow_definition(conn, definition_id)
        if len(_DEFINITIONS) >= _MAX_DEFINITIONS:
            _DEFINITIONS.clear()  # bounded; safe beside another thread's lookups
        _DEFINITIONS[digest] = found
    return found


def _session_time(
    definition: WorkflowDefinition, session_time: datetime | None, now: datetime
) -> datetime:
    """The session time asked for (naive: in the workflow's zone), or the default one.

    Raises InvalidInput naming ``/session_time`` for a time outside the range every time
    zone can show (see tickwork.shared.domain.instants).
    """
    if session_time is not None:
        if session_time.tzinfo is None:
            session_time = session_time.replace(tzinfo=ZoneInfo(definition.timezone))
        if reason := out_of_range(session_time):
            raise InvalidInput([Problem("/session_time", None, reason)])
        return session_time
    # The same default as `tickwork run`: the last scheduled time, or now to the second.
    if definition.schedule is not None:
        last = ScheduleSpec.from_config(definition.schedule).last_session_time(now)
        if last is not None:
            return last
    return now.replace(microsecond=0)


def retry_attempt(
    conn: Connection,
    attempt_id: int,
    *,
    mode: RetryMode,
    from_task: str | None,
    params: dict[str, Any] | None,
    now: datetime,
    name: str | None = None,
    workflow_definition_id: int | None = None,
) -> int:
    """A new attempt (``retry-N``, or ``name``) of the session of ``attempt_id``; its id.

    ``all`` runs everything again; ``failed`` keeps the tasks that succeeded in
    ``attempt_id``; ``from`` keeps only those that come before ``from_task``. ``params``
    are merged over the attempt's own. ``workflow_definition_id`` runs another definition of
    the workflow (a later revision's) instead of the retried attempt's. Raises NotFound for
    an unknown attempt, Conflict
    while the session's latest attempt has not ended (or when ``failed`` would retry an
    attempt that succeeded), InvalidInput naming ``/from`` for an unknown task.
    """
    old = _attempt(conn, attempt_id)
    previous = list_session_attempts(conn, old.session_id)
    latest = previous[-1]
    if not latest.state.is_done:
        raise Conflict(
            f"attempt {latest.id} of session {old.session_id} has not ended "
            f"(it is {latest.state.value}); kill it or wait for it first",
            attempt_id=str(latest.id),
        )
    resume_from: int | None = None
    resume_only: list[str] | None = None
    if mode is RetryMode.FAILED:
        if old.state is AttemptState.SUCCESS:
            raise Conflict(
                f"attempt {attempt_id} succeeded: no task failed; retry with mode 'all'",
                attempt_id=str(attempt_id),
            )
        resume_from = attempt_id
    elif mode is RetryMode.FROM:
        resume_from = attempt_id
        resume_only = resumed_before(conn, attempt_id, from_task or "")
    name = name or f"retry-{len(previous)}"  # `retry-N` unless named (Digdag's --name)
    new_id = insert_ignoring_conflict(
        conn,
        attempts,
        {
            "session_id": old.session_id,
            "name": name,
            "workflow_definition_id": workflow_definition_id or old.workflow_definition_id,
            "state": AttemptState.CREATED.value,
            "timezone": old.timezone,
            "params": merge_params(old.params, params),
            "resume_from_attempt_id": resume_from,
            "resume_only": resume_only,
            "project_dir": old.project_dir,
            "created_at": now,
        },
    )
    if new_id is None:
        raise Conflict(f"session {old.session_id} already has an attempt named {name!r}")
    notify_work(conn)
    return new_id


def _attempt(conn: Connection, attempt_id: int) -> AttemptRow:
    exists = select(attempts.c.id).where(attempts.c.id == attempt_id)
    if conn.execute(exists).scalar_one_or_none() is None:
        raise NotFound(f"no attempt {attempt_id}")
    return get_attempt(conn, attempt_id)


def resumed_before(conn: Connection, attempt_id: int, from_task: str) -> list[str]:
    """Full names of the tasks of ``attempt_id`` that a retry from ``from_task`` keeps.

    Those are the transitive upstreams of the task and of each of its ancestors, with
    their descendants, that succeeded. ``from_task`` is a full name (``+wf+step``) or the
    end of exactly one (``+step``). Raises InvalidInput naming ``/from`` otherwise.
    """
    rows = conn.execute(
        select(tasks.c.id, tasks.c.parent_id, tasks.c.full_name, tasks.c.state).where(
            tasks.c.attempt_id == attempt_id
        )
    ).all()
    edges = conn.execute(
        select(task_dependencies.c.upstream_id, task_dependencies.c.downstream_id)
        .join(tasks, tasks.c.id == task_dependencies.c.downstream_id)
        .where(tasks.c.attempt_id == attempt_id)
    ).all()
    by_name = {str(r.full_name): int(r.id) for r in rows}
    target = by_name[match_task_name(by_name, from_task)]
    parent = {int(r.id): r.parent_id for r in rows}
    children: dict[int, list[int]] = {}
    for task_id, parent_id in parent.items():
        if parent_id is not None:
            children.setdefault(int(parent_id), []).append(task_id)
    upstreams: dict[int, list[int]] = {}
    for edge in edges:
        upstreams.setdefault(int(edge.downstream_id), []).append(int(edge.upstream_id))
    chain = _ancestors_and_self(parent, target)
    kept = _closure(_closure(chain, upstreams) - chain, children)
    succeeded = {int(r.id) for r in rows if r.state == TaskState.SUCCESS.value}
    names = {int(r.id): str(r.full_name) for r in rows}
    return sorted(names[i] for i in kept & succeeded)


def match_task_name(names: Iterable[str], from_task: str) -> str:
    """The full name among ``names`` that ``from_task`` names: itself, or the one name
    ending with it; InvalidInput naming ``/from`` otherwise."""
    known = list(names)
    if from_task in known:
        return from_task
    matches = [n for n in known if from_task.startswith("+") and n.endswith(from_task)]
    if len(matches) == 1:
        return matches[0]
    detail = (
        f"{from_task!r} names several tasks: {', '.join(sorted(matches))}"
        if matches
        else f"no task {from_task!r} in this workflow"
    )
    raise InvalidInput([Problem("/from", None, detail)])


def _ancestors_and_self(parent: dict[int, Any], task_id: int) -> set[int]:
    found: set[int] = set()
    current: int | None = task_id
    while current is not None and current not in found:
        found.add(current)
        up = parent.get(current)
        current = None if up is None else int(up)
    return found


def _closure(start: Iterable[int], links: dict[int, list[int]]) -> set[int]:
    """``start`` and everything reachable from it through ``links``."""
    found = set(start)
    pending = list(found)
    while pending:
        for linked in links.get(pending.pop(), ()):
            if linked not in found:
                found.add(linked)
                pending.append(linked)
    return found


def kill_attempt(conn: Connection, attempt_id: int, now: datetime) -> AttemptState:
    """Ask for an attempt to be killed and wake executors; its state now (CANCELING).

    Raises NotFound for an unknown attempt and Conflict for one that has already ended.
    """
    state = request_kill(conn, attempt_id, now)
    if state.is_done:
        raise Conflict(
            f"attempt {attempt_id} has already ended ({state.value})", attempt_id=str(attempt_id)
        )
    notify_work(conn)
    return state
