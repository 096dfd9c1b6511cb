"""What the API lists and shows about pushed projects: projects with their latest
revision, revisions, workflow definitions, and the last session of each workflow.

List queries are returned unexecuted (no ORDER BY or LIMIT), for a keyset page
(:mod:`tickwork.shared.store.paging`) to order by their id and cut.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Connection, Select, and_, func, select

from tickwork.shared.errors import NotFound
from tickwork.shared.store.history import contains_pattern
from tickwork.shared.store.owners import in_projects
from tickwork.shared.store.tables import (
    attempts,
    project_archives,
    projects,
    revisions,
    schedules,
    sessions,
    workflow_configs,
    workflow_definitions,
)


def _latest_revision_id(project_id: Any) -> Any:
    # An alias of its own, so that it never correlates with ``revisions`` outside.
    candidates = revisions.alias("candidates")
    return (
        select(func.max(candidates.c.id))
        .where(candidates.c.project_id == project_id)
        .scalar_subquery()
    )


def name_contains(column: Any, text: str) -> ColumnElement[bool]:
    """Whether ``column`` (a name) holds ``text``, whatever its case."""
    return func.lower(column).like(contains_pattern(text), escape="\\")


def select_projects(
    name: str | None = None,
    *,
    contains: str | None = None,
    project_ids: Collection[int] | None = None,
) -> Select[Any]:
    """Live projects with their latest revision (columns ``revision_*``, null if none):
    the one named ``name``, or those whose name holds ``contains`` in any case; of the
    ids ``project_ids`` only (None: every project)."""
    latest = revisions.alias("latest")
    query = select(
        projects.c.id,
        projects.c.name,
        projects.c.created_at,
        latest.c.id.label("revision_id"),
        latest.c.name.label("revision_name"),
        latest.c.created_at.label("revision_created_at"),
        latest.c.archive_digest.label("revision_archive_digest"),
        project_archives.c.size_bytes.label("revision_size_bytes"),
    ).select_from(
        projects.outerjoin(latest, latest.c.id == _latest_revision_id(projects.c.id)).outerjoin(
            project_archives, project_archives.c.digest == latest.c.archive_digest
        )
    )
    query = query.where(projects.c.deleted_at.is_(None), in_projects(projects.c.id, project_ids))
    if name is not None:
        query = query.where(projects.c.name == name)
    if contains:
        query = query.where(name_contains(projects.c.name, contains))
    return query


def get_project(conn: Connection, name: str) -> Any:
    """The live project ``name`` with its latest revision; NotFound if there is none."""
    found = conn.execute(select_projects(name)).one_or_none()
    if found is None:
        raise NotFound(f"project {name!r} does not exist")
    return found


def select_revisions(project_id: int) -> Select[Any]:
    """The revisions of a project, with the size of their archive."""
    return (
        select(
            revisions.c.id,
            revisions.c.name,
            revisions.c.created_at,
            revisions.c.archive_digest,
            project_archives.c.size_bytes,
        )
        .select_from(
            revisions.outerjoin(
                project_archives, project_archives.c.digest == revisions.c.archive_digest
            )
        )
        .where(revisions.c.project_id == project_id)
    )


@dataclass(frozen=True)
class RevisionRow:
    """One revision of a project."""

    id: int
    name: str
    created_at: datetime
    archive_digest: str | None


def find_revision(conn: Connection, project_id: int, name: str | None) -> RevisionRow:
    """Revision ``name`` of a project, or its latest one; NotFound naming what is missing."""
    query = select(
        revisions.c.id, revisions.c.name, revisions.c.created_at, revisions.c.archive_digest
    ).where(revisions.c.project_id == project_id)
    if name is None:
        query = query.order_by(revisions.c.id.desc()).limit(1)
    else:
        query = query.where(revisions.c.name == name)
    found = conn.execute(query).one_or_none()
    if found is None:
        what = "has no revision" if name is None else f"has no revision {name!r}"
        raise NotFound(f"the project {what}")
    return RevisionRow(
        id=int(found.id),
        name=found.name,
        created_at=found.created_at,
        archive_digest=found.archive_digest,
    )


def _workflow_columns() -> tuple[Any, ...]:
    return (
        workflow_definitions.c.id,
        workflow_definitions.c.name,
        projects.c.id.label("project_id"),
        projects.c.name.label("project_name"),
        revisions.c.id.label("revision_id"),
        revisions.c.name.label("revision_name"),
        schedules.c.id.label("schedule_id"),
        schedules.c.next_run_time,
        schedules.c.next_schedule_time,
        schedules.c.paused_at,
    )


def _workflow_source() -> Any:
    # The schedule belongs to the workflow of the project, whichever revision defined it.
    return (
        workflow_definitions.join(revisions, revisions.c.id == workflow_definitions.c.revision_id)
        .join(projects, projects.c.id == revisions.c.project_id)
        .outerjoin(
            schedules,
            and_(
                schedules.c.project_id == projects.c.id,
                schedules.c.workflow_name == workflow_definitions.c.name,
                schedules.c.disabled_at.is_(None),
            ),
        )
    )


def _select_definitions(*, with_config: bool) -> Select[Any]:
    columns = list(_workflow_columns())
    source = _workflow_source()
    if with_config:
        columns += [workflow_configs.c.config]
        source = source.join(
            workflow_configs, workflow_configs.c.id == workflow_definitions.c.config_id
        )
    return select(*columns).select_from(source)


def select_workflows(
    *,
    revision_id: int | None = None,
    project: str | None = None,
    with_config: bool = False,
    contains: str | None = None,
    project_contains: str | None = None,
    project_ids: Collection[int] | None = None,
) -> Select[Any]:
    """Workflow definitions of one revision, or of every live project's latest revision
    (optionally one project's, those of projects whose name holds ``project_contains``,
    or those of the ids ``project_ids``), with their active schedule's times (null if
    none); with ``contains``, only workflows whose name holds it (any case)."""
    query = _select_definitions(with_config=with_config)
    if contains:
        query = query.where(name_contains(workflow_definitions.c.name, contains))
    if revision_id is not None:
        return query.where(workflow_definitions.c.revision_id == revision_id)
    query = query.where(
        projects.c.deleted_at.is_(None),
        revisions.c.id == _latest_revision_id(projects.c.id),
        in_projects(projects.c.id, project_ids),
    )
    if project is not None:
        query = query.where(projects.c.name == project)
    if project_contains:
        query = query.where(name_contains(projects.c.name, project_contains))
    return query


def get_workflow(conn: Connection, definition_id: int) -> Any:
    """One workflow definition with its config; NotFound if there is none."""
    query = _select_definitions(with_config=True).where(workflow_definitions.c.id == definition_id)
    found = conn.execute(query).one_or_none()
    if found is None:
        raise NotFound(f"workflow {definition_id} does not exist")
    return found


def find_workflow(conn: Connection, revision_id: int, name: str) -> Any:
    """Workflow ``name`` of a revision, with its config; NotFound if it has none."""
    query = select_workflows(revision_id=revision_id, with_config=True).where(
        workflow_definitions.c.name == name
    )
    found = conn.execute(query).one_or_none()
    if found is None:
        raise NotFound(f"the revision has no workflow {name!r}")
    return found


@dataclass(frozen=True)
class LastSession:
    """The newest session of a workflow and the state of its newest attempt."""

    session_id: int
    session_time: datetime
    attempt_id: int | None
    state: str | None


def last_sessions(
    conn: Connection, workflows: Collection[tuple[int, str]]
) -> dict[tuple[int, str], LastSession]:
    """The newest session of each ``(project_id, workflow_name)``, by that key."""
    keys = sorted(set(workflows))
    if not keys:
        return {}
    # One probe of ix_sessions_project_workflow_id per workflow, however many sessions it has.
    newest = [
        select(func.max(sessions.c.id))
        .where(sessions.c.project_id == project_id, sessions.c.workflow_name == workflow)
        .scalar_subquery()
        for project_id, workflow in keys
    ]
    session_rows = conn.execute(
        select(
            sessions.c.id, sessions.c.project_id, sessions.c.workflow_name, sessions.c.session_time
        ).where(sessions.c.id.in_(newest))
    ).all()
    if not session_rows:
        return {}
    newest_attempts = (
        select(func.max(attempts.c.id))
        .where(attempts.c.session_id.in_([row.id for row in session_rows]))
        .group_by(attempts.c.session_id)
    )
    attempt_rows = conn.execute(
        select(attempts.c.id, attempts.c.session_id, attempts.c.state).where(
            attempts.c.id.in_(newest_attempts)
        )
    ).all()
    by_session = {row.session_id: row for row in attempt_rows}
    found: dict[tuple[int, str], LastSession] = {}
    for row in session_rows:
        attempt = by_session.get(row.id)
        found[(int(row.project_id), str(row.workflow_name))] = LastSession(
            session_id=int(row.id),
            session_time=row.session_time,
            attempt_id=None if attempt is None else int(attempt.id),
            state=None if attempt is None else str(attempt.state),
        )
    return found
