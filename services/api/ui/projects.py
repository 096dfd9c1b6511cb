"""The project pages: the list of projects, one project (its workflows, schedules,
revisions with their archives, secrets by name), and one workflow (its ``.dig`` source,
its schedule's next times, and a grid of its recent sessions by task, coloured by state).
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from flask import Blueprint, render_template, request, send_file
from werkzeug.wrappers import Response

from tickwork.services.api.database import read_connection
from tickwork.services.api.errors import PROBLEM_TYPES, ApiProblem
from tickwork.services.api.paging import decode_cursor, next_cursor
from tickwork.services.api.reads import projects as project_reads
from tickwork.services.api.scope import visible_ids
from tickwork.shared.clock import utc_now
from tickwork.shared.domain.schedule import written_timezone
from tickwork.shared.domain.states import AttemptState
from tickwork.shared.errors import NotFound
from tickwork.shared.store import catalog, dashboard, history
from tickwork.shared.store.projects import get_project_archive
from tickwork.shared.store.schedules import ScheduleRow, list_schedules
from tickwork.shared.store.secrets import list_secrets

blueprint = Blueprint("ui_projects", __name__, url_prefix="/ui")

PROJECTS_PER_PAGE = 50
REVISIONS_PER_PAGE = 20
GRID_SESSIONS = 25
"""Sessions (columns) the workflow's grid shows per page."""
NEXT_TIMES = 10
"""Upcoming session times shown for a scheduled workflow."""
NAME_LIMIT = 255
"""Longest text the projects list's search takes (as long as a name)."""


def _after() -> int | None:
    """The id the page's ``cursor`` stands for (None: the first page)."""
    cursor = request.args.get("cursor")
    return decode_cursor(cursor) if cursor else None


@blueprint.errorhandler(NotFound)
def _not_found(error: NotFound) -> tuple[str, int]:
    """A project, workflow or revision that does not exist: the shared error page, naming it."""
    return _error_page(404, str(error)), 404


@blueprint.errorhandler(ApiProblem)
def _problem(error: ApiProblem) -> tuple[str, int]:
    return _error_page(error.status, error.detail), error.status


def _error_page(status: int, message: str) -> str:
    _, title = PROBLEM_TYPES.get(status, ("error", "Error"))
    return render_template("ui/error.html", status=status, title=title, message=message)


@blueprint.get("/projects")
def projects() -> str:
    """Live projects, newest first, with their latest revision and workflow count; ``q``
    keeps those whose name holds it, in any case."""
    contains = request.args.get("q", "").strip()
    if len(contains) > NAME_LIMIT:
        raise ApiProblem(400, f"q: at most {NAME_LIMIT} characters")
    with read_connection() as conn:
        found = project_reads.list_projects(
            conn,
            contains=contains or None,
            after=_after(),
            limit=PROJECTS_PER_PAGE,
            project_ids=visible_ids(),
        )
    return render_template(
        "ui/projects.html",
        projects=found.page.items,
        counts=found.workflow_counts,
        cursor=next_cursor(found.page.next_after),
    )


def _still_running(states: Iterable[str | AttemptState | None]) -> bool:
    """Whether one of these attempt states has not ended: the page's live part then
    fetches itself again often."""
    return any(state is not None and not AttemptState(state).is_done for state in states)


def _workflows_of(conn: Any, found: Any) -> dict[str, Any]:
    """The project page's workflows (those whose name holds the query's ``workflow``, in
    any case) with their last sessions, as its template takes them."""
    contains = request.args.get("workflow", "").strip()
    if len(contains) > NAME_LIMIT:
        raise ApiProblem(400, f"workflow: at most {NAME_LIMIT} characters")
    workflows: list[Any] = []
    if found.revision_id is not None:
        workflows = project_reads.list_workflows(
            conn, int(found.revision_id), contains=contains or None
        )
    last = catalog.last_sessions(conn, [(row.project_id, row.name) for row in workflows])
    running = _still_running(session.state for session in last.values())
    return {"project": found, "workflows": workflows, "last": last, "live_active": running}


@blueprint.get("/projects/<name>/live")
def project_live(name: str) -> str:
    """The project page's workflows alone, for the page to put in place while they run."""
    with read_connection() as conn:
        context = _workflows_of(conn, catalog.get_project(conn, name))
    return render_template("ui/projects_project_workflows.html", **context)


@blueprint.get("/projects/<name>")
def project(name: str) -> str:
    """One project: its workflows, schedules, revisions and secrets' names."""
    with read_connection() as conn:
        found = catalog.get_project(conn, name)
        context = _workflows_of(conn, found)
        schedules = list_schedules(conn, project_id=int(found.id))
        page = project_reads.list_revisions(
            conn, int(found.id), after=_after(), limit=REVISIONS_PER_PAGE
        )
        secrets = list_secrets(conn, name)
    return render_template(
        "ui/projects_project.html",
        **context,
        schedules=schedules,
        revisions=page.items,
        cursor=next_cursor(page.next_after),
        secrets=secrets,
    )


@blueprint.get("/projects/<name>/archive")
def archive(name: str) -> Response:
    """The tar.gz of a revision (``revision``, default the latest): the bytes
    ``GET /api/projects/{name}/archive`` answers."""
    with read_connection() as conn:
        found = catalog.get_project(conn, name)
        revision = catalog.find_revision(conn, int(found.id), request.args.get("revision"))
        if revision.archive_digest is None:
            raise NotFound(f"revision {revision.name!r} was not pushed: it has no archive")
        content = get_project_archive(conn, revision.archive_digest)
    return send_file(
        io.BytesIO(content),
        mimetype="application/gzip",
        as_attachment=True,
        download_name=f"{name}-{revision.name}.tar.gz",
        etag=revision.archive_digest,
        max_age=0,
    )


@dataclass
class GridRow:
    """One task of the grid: its full name, depth in the tree, and a cell per column."""

    full_name: str
    depth: int
    is_group: bool
    sort_key: tuple[tuple[int, str], ...]
    cells: dict[int, dashboard.GridTask] = field(default_factory=dict)


@blueprint.get("/projects/<name>/workflows/<workflow>/live")
def workflow_live(name: str, workflow: str) -> str:
    """The workflow page's grid alone, for the page to put in place while it runs."""
    return _workflow_page(name, workflow, "ui/projects_workflow_grid.html")


@blueprint.get("/projects/<name>/workflows/<workflow>")
def workflow(name: str, workflow: str) -> str:
    """One workflow of the project's latest revision: its source, schedule and grid."""
    return _workflow_page(name, workflow, "ui/projects_workflow.html")


def _workflow_page(name: str, workflow: str, template: str) -> str:
    with read_connection() as conn:
        found = catalog.get_project(conn, name)
        revision = catalog.find_revision(conn, int(found.id), request.args.get("revision"))
        definition = catalog.find_workflow(conn, revision.id, workflow)
        source = None
        if template == "ui/projects_workflow.html":  # the live part shows no source
            source = project_reads.workflow_source(conn, revision.archive_digest, workflow)
        schedule = project_reads.active_schedule(conn, name, workflow)
        page = history.list_sessions(
            conn, project=name, workflow=workflow, after=_after(), limit=GRID_SESSIONS
        )
        columns = list(reversed(page.items))
        attempt_ids = [s.last_attempt.id for s in columns if s.last_attempt is not None]
        grid = _grid_rows(dashboard.grid_tasks(conn, attempt_ids))
    zone = str(dict(definition.config).get("timezone", "UTC"))
    running = _still_running(s.last_attempt.state for s in columns if s.last_attempt)
    return render_template(
        template,
        live_active=running,
        project=found,
        revision=revision,
        workflow=definition,
        zone=zone,
        zone_written=written_timezone(zone),
        source=source,
        schedule=schedule,
        next_times=_next_times(schedule, utc_now()),
        columns=columns,
        grid=grid,
        cursor=next_cursor(page.next_after),
    )


def _next_times(schedule: ScheduleRow | None, now: datetime) -> list[tuple[datetime, datetime]]:
    """The schedule's next session times with their run times (as ``tickwork schedules
    preview``), from the first one not dealt with yet."""
    if schedule is None:
        return []
    first = schedule.next_schedule_time
    after = now if first is None else first - timedelta(microseconds=1)
    spec = schedule.schedule
    times = spec.session_times(after, NEXT_TIMES)
    return [(time, spec.run_time(time, schedule.seed)) for time in times]


def _grid_rows(tasks: list[dashboard.GridTask]) -> list[GridRow]:
    """The grid's rows: every task full name of the columns' attempts, as a tree (each
    task after its parent, siblings by position), each with its cell per attempt."""
    by_id = {task.id: task for task in tasks}
    rows: dict[str, GridRow] = {}
    for task in tasks:
        row = rows.get(task.full_name)
        if row is None:
            path = _path(task, by_id)
            row = GridRow(task.full_name, len(path) - 1, task.is_group, path)
            rows[task.full_name] = row
        row.cells[task.attempt_id] = task
    return sorted(rows.values(), key=lambda row: row.sort_key)


def _path(
    task: dashboard.GridTask, by_id: dict[int, dashboard.GridTask]
) -> tuple[tuple[int, str], ...]:
    """(position, full name) of the task and each of its ancestors, root first."""
    path: list[tuple[int, str]] = []
    current: dashboard.GridTask | None = task
    while current is not None:
        path.append((current.position, current.full_name))
        current = None if current.parent_id is None else by_id.get(current.parent_id)
    return tuple(reversed(path))
