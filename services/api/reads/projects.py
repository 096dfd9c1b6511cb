"""Reads of the project pages: a page of projects (optionally those whose name holds a
text), one project's workflows and a page of its revisions, a workflow's active schedule
and the archive file that defines it.

The UI's project pages (ui/projects.py) read through these; the REST routes
(routes/projects.py) page the same catalog queries.
"""

from __future__ import annotations

import gzip
import io
import tarfile
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from tickwork.shared.errors import NotFound
from tickwork.shared.store import catalog, dashboard
from tickwork.shared.store.history import Page
from tickwork.shared.store.paging import fetch_keyset_page
from tickwork.shared.store.projects import get_project_archive
from tickwork.shared.store.schedules import ScheduleRow, find_schedule
from tickwork.shared.store.tables import projects, revisions, workflow_definitions

MAX_SOURCE_BYTES = 1024 * 1024
"""The largest workflow file shown; a larger one is left out."""


@dataclass(frozen=True)
class ProjectsPage:
    """A page of live projects, newest first, with how many workflows each one's latest
    revision defines (by revision id)."""

    page: Page[Any]
    workflow_counts: dict[int, int]


def list_projects(
    conn: Connection,
    *,
    contains: str | None,
    after: int | None,
    limit: int,
    project_ids: Collection[int] | None = None,
) -> ProjectsPage:
    """Live projects newest first, those whose name holds ``contains`` (any case) if given,
    each with its latest revision; of the ids ``project_ids`` only (None: every project)."""
    query = catalog.select_projects(contains=contains, project_ids=project_ids)
    found = fetch_keyset_page(conn, query, projects.c.id, after=after, limit=limit)
    revision_ids = [row.revision_id for row in found.rows if row.revision_id is not None]
    counts = dashboard.count_workflows(conn, revision_ids)
    return ProjectsPage(Page(list(found.rows), found.next_after), counts)


def list_workflows(conn: Connection, revision_id: int, *, contains: str | None = None) -> list[Any]:
    """The workflows a revision defines (those whose name holds ``contains``, any case),
    by name, with their schedule's times."""
    query = catalog.select_workflows(revision_id=revision_id, contains=contains)
    return list(conn.execute(query.order_by(workflow_definitions.c.name)))


def list_revisions(
    conn: Connection, project_id: int, *, after: int | None, limit: int
) -> Page[Any]:
    """A page of a project's revisions, newest first, with their archives' sizes."""
    found = fetch_keyset_page(
        conn, catalog.select_revisions(project_id), revisions.c.id, after=after, limit=limit
    )
    return Page(list(found.rows), found.next_after)


def workflow_source(conn: Connection, digest: str | None, workflow: str) -> list[str] | None:
    """The lines of ``<workflow>.dig`` in the pushed archive (None: no archive or file)."""
    if digest is None:
        return None
    content = get_project_archive(conn, digest)
    wanted = {f"{workflow}.dig", f"./{workflow}.dig"}
    try:
        with tarfile.open(fileobj=io.BytesIO(content), mode="r:gz") as tar:
            for member in tar:
                if member.name in wanted and member.isfile() and member.size <= MAX_SOURCE_BYTES:
                    data = tar.extractfile(member)
                    if data is not None:
                        return data.read().decode("utf-8", errors="replace").splitlines()
    except (tarfile.TarError, gzip.BadGzipFile, EOFError):
        return None
    return None


def active_schedule(conn: Connection, project: str, workflow: str) -> ScheduleRow | None:
    """The workflow's schedule unless it has none or it was removed."""
    try:
        found = find_schedule(conn, project, workflow)
    except NotFound:
        return None
    return None if found.disabled_at is not None else found
