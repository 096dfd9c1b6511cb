"""What ``require>`` asks of the store: the target workflow, its session, and who waits on it."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from sqlalchemy import Connection, select

from tickwork.shared.domain.states import TaskState
from tickwork.shared.domain.workflow import WorkflowDefinition
from tickwork.shared.errors import NotFound
from tickwork.shared.store.engine import notify_work
from tickwork.shared.store.projects import (
    config_digest,
    ensure_revision,
    ensure_workflow_definition,
)
from tickwork.shared.store.sessions import ensure_session, insert_attempt, list_session_attempts
from tickwork.shared.store.starts import StartResult
from tickwork.shared.store.tables import projects, revisions, tasks, workflow_definitions

AWAITED_KEY = "require_attempt_id"
"""The key of a waiting ``require>`` task's ``result`` that holds the attempt it waits on."""


@dataclass(frozen=True)
class ProjectRef:
    """A live project: its id, its name and, for one run from a directory, that directory."""

    id: int
    name: str
    source_dir: str | None


def find_project(conn: Connection, *, project_id: int | None, name: str | None) -> ProjectRef:
    """The live project with ``project_id`` (or else ``name``); NotFound naming it if none."""
    query = select(projects.c.id, projects.c.name, projects.c.source_dir).where(
        projects.c.deleted_at.is_(None)
    )
    if project_id is not None:
        row = conn.execute(query.where(projects.c.id == project_id)).one_or_none()
        shown = f"no project with id {project_id}"
    else:
        row = conn.execute(query.where(projects.c.name == name)).one_or_none()
        shown = f"no project {name!r}"
    if row is None:
        raise NotFound(shown)
    return ProjectRef(id=int(row.id), name=str(row.name), source_dir=row.source_dir)


def latest_definition_id(conn: Connection, project_id: int, workflow: str) -> int | None:
    """The definition id of ``workflow`` in the project's latest revision; None if absent."""
    latest = (
        select(revisions.c.id)
        .where(revisions.c.project_id == project_id)
        .order_by(revisions.c.id.desc())
        .limit(1)
        .scalar_subquery()
    )
    query = select(workflow_definitions.c.id).where(
        workflow_definitions.c.revision_id == latest, workflow_definitions.c.name == workflow
    )
    found = conn.execute(query).scalar_one_or_none()
    return None if found is None else int(found)


def store_local_definition(
    conn: Connection, project_id: int, definition: WorkflowDefinition, now: datetime
) -> int:
    """Store a workflow read from a local project's directory as ``tickwork run`` does (in
    revision ``local-<digest>``); its definition id."""
    revision = f"local-{config_digest(definition.to_config())[:16]}"
    revision_id = ensure_revision(conn, project_id, revision, {}, now)
    return ensure_workflow_definition(conn, revision_id, definition)


def start_local_attempt(
    conn: Connection,
    *,
    project: ProjectRef,
    definition: WorkflowDefinition,
    session_time: datetime,
    params: dict[str, object],
    now: datetime,
) -> StartResult:
    """The latest attempt of a local project's session of ``definition``, or a new one.

    A naive ``session_time`` is read in the workflow's time zone. A new attempt is named as
    ``tickwork run`` names its own (``run-N``) and runs in the project's directory.
    """
    if session_time.tzinfo is None:
        session_time = session_time.replace(tzinfo=ZoneInfo(definition.timezone))
    definition_id = store_local_definition(conn, project.id, definition, now)
    session_id = ensure_session(
        conn,
        project_id=project.id,
        workflow_name=definition.name,
        session_time=session_time,
        now=now,
    )
    previous = list_session_attempts(conn, session_id)
    if previous:
        return StartResult(previous[-1].id, session_id, created=False)
    attempt_id = insert_attempt(
        conn,
        session_id=session_id,
        name="run-1",  # the session has no attempt yet
        workflow_definition_id=definition_id,
        timezone=definition.timezone,
        params=dict(params),
        now=now,
        project_dir=project.source_dir,
    )
    if attempt_id is None:  # a concurrent start won: its attempt is the session's latest
        return StartResult(list_session_attempts(conn, session_id)[-1].id, session_id, False)
    notify_work(conn)
    return StartResult(attempt_id, session_id, created=True)


def attempts_awaited_by(conn: Connection, attempt_ids: Collection[int]) -> set[int]:
    """The attempts that the waiting ``require>`` tasks of ``attempt_ids`` wait on."""
    awaited = tasks.c.result[AWAITED_KEY].as_integer()
    query = select(awaited).where(
        tasks.c.attempt_id.in_(list(attempt_ids)),
        tasks.c.state.in_([TaskState.DELAYED.value, TaskState.READY.value]),
        awaited.is_not(None),
    )
    return {int(i) for i in conn.execute(query).scalars()}


def wake_tasks_requiring(conn: Connection, attempt_ids: Collection[int], now: datetime) -> int:
    """Make the ``require>`` tasks waiting on ``attempt_ids`` (which ended) due ``now``;
    how many there were."""
    awaited = tasks.c.result[AWAITED_KEY].as_integer()
    result = conn.execute(
        tasks.update()
        .where(
            tasks.c.state == TaskState.DELAYED.value,
            tasks.c.not_before > now,
            awaited.in_(list(attempt_ids)),
        )
        .values(not_before=now, updated_at=now)
    )
    return int(result.rowcount)
