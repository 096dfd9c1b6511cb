"""Workflows of every project's latest revision, with their schedule and last session."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from apiflask import APIBlueprint
from pydantic import BaseModel, Field

from tickwork.services.api.database import read_connection
from tickwork.services.api.paging import PageQuery, fetch_page
from tickwork.services.api.scope import visible_ids
from tickwork.services.api.times import format_time
from tickwork.shared.domain.schedule import written_timezone
from tickwork.shared.store import catalog
from tickwork.shared.store.schedule_reads import last_session_json
from tickwork.shared.store.tables import workflow_definitions

blueprint = APIBlueprint("workflows", __name__, url_prefix="/api/workflows", tag="Workflows")


class LastSessionOut(BaseModel):
    """The workflow's newest session and the state of its newest attempt."""

    id: str
    session_time: str
    attempt_id: str | None
    state: str | None


class WorkflowOut(BaseModel):
    """A workflow definition of a revision."""

    id: str
    name: str
    project: str
    project_id: str
    revision: str
    revision_id: str
    schedule_id: str | None
    next_run_time: str | None
    next_session_time: str | None
    paused: bool
    last_session: LastSessionOut | None


class WorkflowDetail(WorkflowOut):
    """A workflow with its definition: the parsed workflow file."""

    timezone: str
    schedule: dict[str, Any] | None
    config: dict[str, Any]


class WorkflowList(BaseModel):
    """A page of workflows, newest definition first."""

    items: list[WorkflowOut]
    next_cursor: str | None


class WorkflowQuery(PageQuery):
    """Filters of the workflow list."""

    project: str | None = Field(None, max_length=255, description="Only this project's.")
    name_contains: str | None = Field(
        None, max_length=255, description="Only workflows whose name holds this, in any case."
    )
    project_contains: str | None = Field(
        None,
        max_length=255,
        description="Only workflows of projects whose name holds this, in any case.",
    )


def workflow_item(
    row: Any, last: Mapping[tuple[int, str], catalog.LastSession], *, with_config: bool = False
) -> dict[str, Any]:
    """A workflow row (see catalog.select_workflows) as JSON; ``last`` by (project, name)."""
    found = last.get((int(row.project_id), str(row.name)))
    config = dict(row.config) if with_config else {}
    zone = str(config.get("timezone", "UTC")) if with_config else None
    item: dict[str, Any] = {
        "id": str(row.id),
        "name": row.name,
        "project": row.project_name,
        "project_id": str(row.project_id),
        "revision": row.revision_name,
        "revision_id": str(row.revision_id),
        "schedule_id": None if row.schedule_id is None else str(row.schedule_id),
        "next_run_time": format_time(row.next_run_time, zone),
        "next_session_time": format_time(row.next_schedule_time, zone),
        "paused": row.paused_at is not None,
        "last_session": last_session_json(found, zone),
    }
    if zone is not None:
        item.update(timezone=written_timezone(zone), schedule=config.get("schedule"), config=config)
    return item


@blueprint.get("")
@blueprint.input(WorkflowQuery, location="query", arg_name="query")
@blueprint.output(WorkflowList)
def list_workflows(query: WorkflowQuery) -> dict[str, Any]:
    """Workflows of every project's latest revision (``project``: one project's), with the
    last session's state and the schedule's next run and session times."""
    with read_connection() as conn:
        select = catalog.select_workflows(
            project=query.project,
            contains=query.name_contains,
            project_contains=query.project_contains,
            project_ids=visible_ids(),
        )
        rows, next_cursor = fetch_page(conn, select, workflow_definitions.c.id, query)
        last = catalog.last_sessions(conn, [(row.project_id, row.name) for row in rows])
    return {"items": [workflow_item(row, last) for row in rows], "next_cursor": next_cursor}


@blueprint.get("/<id:workflow_id>")
@blueprint.output(WorkflowDetail)
def get_workflow(workflow_id: int) -> dict[str, Any]:
    """One workflow definition (of any revision) with its config."""
    with read_connection() as conn:
        row = catalog.get_workflow(conn, workflow_id)
        last = catalog.last_sessions(conn, [(row.project_id, row.name)])
    return workflow_item(row, last, with_config=True)
