"""The header's search: projects and workflows whose names hold a text (any case), and the
session or attempt a number names.

The UI's ``/ui/search`` page renders these records, and answers them as JSON for scripts.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field

from sqlalchemy import Connection

from tickwork.shared.domain.storable import MAX_INTEGER
from tickwork.shared.errors import NotFound
from tickwork.shared.store import catalog, history
from tickwork.shared.store.history import AttemptView, SessionView
from tickwork.shared.store.tables import projects, workflow_definitions

MATCH_LIMIT = 20
"""Most projects, and most workflows, a search lists."""
QUERY_LIMIT = 255
"""Longest text searched for (as long as a name)."""
_ID = re.compile(r"#?\s*(\d{1,19})")


@dataclass(frozen=True)
class WorkflowMatch:
    """A workflow of a project's latest revision."""

    project: str
    name: str


@dataclass(frozen=True)
class SearchResults:
    """What a search found, by kind; ``more_*`` when a kind had more than listed."""

    query: str
    projects: list[str] = field(default_factory=list)
    workflows: list[WorkflowMatch] = field(default_factory=list)
    attempt: AttemptView | None = None
    session: SessionView | None = None
    more_projects: bool = False
    more_workflows: bool = False

    @property
    def count(self) -> int:
        """How many matches are listed."""
        ids = (self.attempt is not None) + (self.session is not None)
        return len(self.projects) + len(self.workflows) + ids


def id_in(text: str) -> int | None:
    """The id ``text`` is (``123`` or ``#123``), if it is one an id can be."""
    found = _ID.fullmatch(text.strip())
    if found is None:
        return None
    value = int(found.group(1))
    return value if 0 < value <= MAX_INTEGER else None


def search(
    conn: Connection,
    text: str,
    limit: int = MATCH_LIMIT,
    project_ids: Collection[int] | None = None,
) -> SearchResults:
    """Projects and workflows whose names hold ``text`` (any case), and, when ``text`` is
    an id, the attempt and the session of that id; of the projects ``project_ids`` only
    (None: every project)."""
    text = text.strip()[:QUERY_LIMIT]
    if not text:
        return SearchResults(query=text)
    project_rows = conn.execute(
        catalog.select_projects(contains=text, project_ids=project_ids)
        .order_by(projects.c.name)
        .limit(limit + 1)
    ).all()
    workflow_rows = conn.execute(
        catalog.select_workflows(contains=text, project_ids=project_ids)
        .order_by(projects.c.name, workflow_definitions.c.name)
        .limit(limit + 1)
    ).all()
    number = id_in(text)
    return SearchResults(
        query=text,
        projects=[str(row.name) for row in project_rows[:limit]],
        workflows=[
            WorkflowMatch(str(row.project_name), str(row.name)) for row in workflow_rows[:limit]
        ],
        attempt=None if number is None else _attempt(conn, number, project_ids),
        session=None if number is None else _session(conn, number, project_ids),
        more_projects=len(project_rows) > limit,
        more_workflows=len(workflow_rows) > limit,
    )


def _attempt(
    conn: Connection, attempt_id: int, project_ids: Collection[int] | None
) -> AttemptView | None:
    try:
        found = history.get_attempt_view(conn, attempt_id)
    except NotFound:
        return None
    return found if project_ids is None or found.project_id in project_ids else None


def _session(
    conn: Connection, session_id: int, project_ids: Collection[int] | None
) -> SessionView | None:
    try:
        found = history.get_session(conn, session_id)
    except NotFound:
        return None
    return found if project_ids is None or found.project_id in project_ids else None
