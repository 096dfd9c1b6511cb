"""Projects: push a tar.gz as a revision, list, show, delete, revisions, archives, workflows."""

from __future__ import annotations

import io
from typing import Any, cast

from apiflask import APIBlueprint
from flask import Response, request, send_file
from pydantic import BaseModel, Field
from sqlalchemy import Connection, Row

from tickwork.services.api.body import ARCHIVE_SCHEMA, binary_body
from tickwork.services.api.database import read_connection, write_transaction
from tickwork.services.api.errors import ApiProblem, InvalidParameter
from tickwork.services.api.extensions import api_config
from tickwork.services.api.models import RequestQuery
from tickwork.services.api.paging import PageQuery, fetch_page, paged_list
from tickwork.services.api.routes.workflows import WorkflowDetail, WorkflowList, workflow_item
from tickwork.services.api.scope import forget_visible, limited_identity, visible_ids
from tickwork.services.api.times import format_time, parse_time
from tickwork.shared.clock import utc_now
from tickwork.shared.domain.triggers import TriggerSpec
from tickwork.shared.dsl.archive import ProjectArchive, read_project_archive
from tickwork.shared.errors import InvalidInput
from tickwork.shared.store import catalog
from tickwork.shared.store.projects import (
    PushResult,
    check_project_name,
    check_revision_name,
    delete_project,
    get_project_archive,
    push_revision,
)
from tickwork.shared.store.tables import projects, revisions, workflow_definitions

blueprint = APIBlueprint("projects", __name__, url_prefix="/api/projects", tag="Projects")

ARCHIVE_MEDIA_TYPES = frozenset(
    {"application/gzip", "application/x-gzip", "application/octet-stream", "application/x-tar"}
)


class PushQuery(RequestQuery):
    """Parameters of a push."""

    revision: str | None = Field(
        None,
        max_length=255,
        description="Revision name (default: a UUID); the same name and archive again answers 200.",
    )
    schedule_from: str | None = Field(
        None,
        max_length=64,
        description="New schedules start at this time (ISO 8601; UTC if no offset).",
    )


class ScheduleChanges(BaseModel):
    """Workflows whose schedule a push added, changed or removed."""

    added: list[str]
    updated: list[str]
    removed: list[str]


class Pushed(BaseModel):
    """The revision a push stored."""

    project: str
    project_id: str
    revision: str
    revision_id: str
    archive_digest: str
    created: bool
    workflows: list[str]
    schedules: ScheduleChanges
    warnings: list[str] = Field(
        default_factory=list,
        description="What the workflow files hold that is worth a look but was accepted, "
        "as `file:line: message` (an option no operator reads).",
    )


class RevisionOut(BaseModel):
    """A revision of a project."""

    id: str
    name: str
    created_at: str
    archive_digest: str | None
    size_bytes: int | None = None


class ProjectOut(BaseModel):
    """A project and its latest revision."""

    id: str
    name: str
    created_at: str
    revision: RevisionOut | None


class ProjectList(BaseModel):
    """A page of projects."""

    items: list[ProjectOut]
    next_cursor: str | None


class RevisionList(BaseModel):
    """A page of revisions, newest first."""

    items: list[RevisionOut]
    next_cursor: str | None


class ProjectQuery(PageQuery):
    """Filters of the project list."""

    name: str | None = Field(None, max_length=255, description="Only the project of this name.")
    name_contains: str | None = Field(
        None, max_length=255, description="Only projects whose name holds this, in any case."
    )


class RevisionQuery(RequestQuery):
    """Which revision: ``revision`` by name, else the latest."""

    revision: str | None = Field(None, max_length=255)


class WorkflowsQuery(PageQuery):
    """Which revision's workflows: ``revision`` by name, else the latest."""

    revision: str | None = Field(None, max_length=255)


def _checked_name(name: str) -> str:
    try:
        check_project_name(name)
    except InvalidInput as exc:
        raise InvalidParameter("name", exc.problems[0].message) from None
    return name


def _pushed(result: PushResult) -> dict[str, Any]:
    return {
        "project": result.project_name,
        "project_id": str(result.project_id),
        "revision": result.revision_name,
        "revision_id": str(result.revision_id),
        "archive_digest": result.archive_digest,
        "created": result.created,
        "workflows": list(result.workflows),
        "schedules": {
            "added": list(result.schedules_added),
            "updated": list(result.schedules_updated),
            "removed": list(result.schedules_removed),
        },
    }


@blueprint.put("/<name>")
@blueprint.input(PushQuery, location="query", arg_name="query")
@blueprint.output(Pushed, status_code=201, description="A new revision")
@blueprint.doc(
    responses={
        200: "The revision already held this archive",
        413: "The archive, its content or its headers are over a limit",
        415: "The body is not a tar.gz",
        422: "An invalid workflow or an unsafe archive (every error listed)",
    },
)
@binary_body
def push_project(name: str, query: PushQuery) -> tuple[dict[str, Any], int]:
    """Upload a tar.gz (body) as a new revision; the project is created if needed.

    Every workflow is validated first: one invalid file rejects the whole upload.
    """
    _checked_name(name)
    if query.revision is not None:
        try:
            check_revision_name(query.revision)
        except InvalidInput as exc:
            raise InvalidParameter("revision", exc.problems[0].message) from None
    if request.mimetype not in ARCHIVE_MEDIA_TYPES:
        raise ApiProblem(415, "the body must be a tar.gz (Content-Type: application/gzip)")
    schedule_from = (
        parse_time(query.schedule_from, parameter="schedule_from") if query.schedule_from else None
    )
    archive = read_project_archive(request.get_data(), max_bytes=api_config().max_archive_bytes)
    _check_trigger_scope(archive)
    with write_transaction() as conn:
        result = push_revision(
            conn,
            project_name=name,
            revision_name=query.revision,
            archive=archive,
            now=utc_now(),
            schedule_from=schedule_from,
        )
    forget_visible()  # a new project shows in limited tokens' lists at once here
    warnings = [str(w) for d in archive.workflows.values() for w in d.warnings]
    return {**_pushed(result), "warnings": warnings}, 201 if result.created else 200


def _check_trigger_scope(archive: ProjectArchive) -> None:
    """403 when a token limited to projects pushes a trigger waiting for a project it
    does not cover: the trigger would read that project's sessions."""
    identity = limited_identity()
    if identity is None:
        return
    for definition in archive.workflows.values():
        if definition.trigger is None:
            continue
        for upstream in TriggerSpec.from_config(definition.trigger).after:
            if upstream.project is not None and not identity.covers(upstream.project):
                raise ApiProblem(
                    403,
                    f"{definition.name}.dig: the trigger waits for project "
                    f"{upstream.project!r}, which token {identity.name} does not cover",
                )


def _revision(row: Any, prefix: str = "revision_") -> dict[str, Any] | None:
    mapping = row._mapping
    if mapping[f"{prefix}id"] is None:
        return None
    return {
        "id": str(mapping[f"{prefix}id"]),
        "name": mapping[f"{prefix}name"],
        "created_at": format_time(mapping[f"{prefix}created_at"]),
        "archive_digest": mapping[f"{prefix}archive_digest"],
        "size_bytes": mapping[f"{prefix}size_bytes"],
    }


def project_item(row: Row[Any]) -> dict[str, Any]:
    """A project row (with its latest revision's ``revision_*`` columns) as JSON."""
    return {
        "id": str(row.id),
        "name": row.name,
        "created_at": format_time(row.created_at),
        "revision": _revision(row),
    }


@blueprint.get("")
@blueprint.input(ProjectQuery, location="query", arg_name="query")
@blueprint.output(ProjectList)
def list_projects(query: ProjectQuery) -> dict[str, Any]:
    """Projects, newest first (``name``: only that one)."""
    with read_connection() as conn:
        return paged_list(
            conn,
            catalog.select_projects(
                query.name, contains=query.name_contains, project_ids=visible_ids()
            ),
            projects.c.id,
            query,
            project_item,
        )


@blueprint.get("/<name>")
@blueprint.output(ProjectOut)
def get_project(name: str) -> dict[str, Any]:
    """One project with its latest revision."""
    with read_connection() as conn:
        return project_item(catalog.get_project(conn, name))


@blueprint.delete("/<name>")
@blueprint.output(ProjectOut)
def remove_project(name: str) -> dict[str, Any]:
    """Soft delete: its schedules are removed, its sessions and revisions kept."""
    with write_transaction() as conn:
        found = project_item(catalog.get_project(conn, name))
        delete_project(conn, name, utc_now())
    return found


def _find_revision(conn: Connection, name: str, revision: str | None) -> catalog.RevisionRow:
    """Revision ``revision`` of the live project ``name`` (default its latest); NotFound
    naming what is missing."""
    project = catalog.get_project(conn, name)
    return catalog.find_revision(conn, int(project.id), revision)


def revision_item(row: Row[Any]) -> dict[str, Any]:
    """A revision row as JSON."""
    return {
        "id": str(row.id),
        "name": row.name,
        "created_at": format_time(row.created_at),
        "archive_digest": row.archive_digest,
        "size_bytes": row.size_bytes,
    }


@blueprint.get("/<name>/revisions")
@blueprint.input(PageQuery, location="query", arg_name="query")
@blueprint.output(RevisionList)
def list_revisions(name: str, query: PageQuery) -> dict[str, Any]:
    """The project's revisions, newest first."""
    with read_connection() as conn:
        project = catalog.get_project(conn, name)
        select = catalog.select_revisions(int(project.id))
        return paged_list(conn, select, revisions.c.id, query, revision_item)


@blueprint.get("/<name>/archive")
@blueprint.input(RevisionQuery, location="query", arg_name="query")
@blueprint.doc(
    responses=cast(
        Any,
        {
            200: {
                "description": "The tar.gz of the revision",
                "content": {"application/gzip": {"schema": ARCHIVE_SCHEMA}},
            }
        },
    )
)
def download_archive(name: str, query: RevisionQuery) -> Response:
    """The tar.gz of a revision (default the latest)."""
    with read_connection() as conn:
        revision = _find_revision(conn, name, query.revision)
        if revision.archive_digest is None:
            raise ApiProblem(404, f"revision {revision.name!r} was not pushed: it has no archive")
        content = get_project_archive(conn, revision.archive_digest)
    response = send_file(
        io.BytesIO(content),
        mimetype="application/gzip",
        as_attachment=True,
        download_name=f"{name}-{revision.name}.tar.gz",
        etag=revision.archive_digest,
        max_age=0,
    )
    return response


@blueprint.get("/<name>/workflows")
@blueprint.input(WorkflowsQuery, location="query", arg_name="query")
@blueprint.output(WorkflowList)
def list_project_workflows(name: str, query: WorkflowsQuery) -> dict[str, Any]:
    """The workflows of the latest revision, or of ``revision``."""
    with read_connection() as conn:
        revision = _find_revision(conn, name, query.revision)
        select = catalog.select_workflows(revision_id=revision.id)
        rows, next_cursor = fetch_page(conn, select, workflow_definitions.c.id, query)
        last = catalog.last_sessions(conn, [(row.project_id, row.name) for row in rows])
    return {"items": [workflow_item(row, last) for row in rows], "next_cursor": next_cursor}


@blueprint.get("/<name>/workflows/<workflow>")
@blueprint.input(RevisionQuery, location="query", arg_name="query")
@blueprint.output(WorkflowDetail)
def get_project_workflow(name: str, workflow: str, query: RevisionQuery) -> dict[str, Any]:
    """One workflow of the latest revision (or of ``revision``) with its definition."""
    with read_connection() as conn:
        revision = _find_revision(conn, name, query.revision)
        row = catalog.find_workflow(conn, revision.id, workflow)
        last = catalog.last_sessions(conn, [(row.project_id, row.name)])
    return workflow_item(row, last, with_config=True)
