"""Project scopes: what a token limited to projects (``tickwork tokens create --project
GLOB``) may see and change, on every REST route and every page.

- Before a route runs, :func:`check_scope` reads its path. A project it names
  (``<name>``), or the project of the attempt, session, schedule or workflow it names by
  id (logs, tasks and log files are read through their attempt), must be one the token's
  globs cover; else it raises the NotFound a route raises for a missing one, in the same
  words, and the route's own handler answers it (a problem document, or the page's "no
  such attempt"), so a limited token cannot tell another project's id from one that does
  not exist. Pushing a
  project the globs do not cover is a 403 instead (its name says nothing of what exists).
- A route taking a project's name in its body (starting an attempt) asks
  :func:`require_project`.
- Lists, counts and searches ask :func:`visible_projects` and show only the rows of the
  projects it holds.
- Managing tokens needs an admin token without globs (:func:`check_scope`, 403): a limited
  admin could otherwise make itself an unlimited token. So does changing a pool: every
  project shares it, so a limited admin would steer other projects' tasks.

A token without globs, an environment token, and a server without tokens see everything;
they cost nothing here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from flask import current_app, g, request
from sqlalchemy import select

from tickwork.services.api.audit import mark_refused
from tickwork.services.api.auth import Identity
from tickwork.services.api.database import read_connection
from tickwork.services.api.errors import ApiProblem
from tickwork.shared.errors import NotFound
from tickwork.shared.store.owners import OWNER_QUERIES, project_of
from tickwork.shared.store.tables import projects

VISIBLE_KEY = "visible_projects"
VISIBLE_CACHE_KEY = "tickwork.visible_projects"
VISIBLE_SECONDS = 1.0
"""How long a process keeps which projects a set of globs covers."""
VISIBLE_CACHE_MAX = 1024
TOKEN_BLUEPRINTS = frozenset({"tokens"})
SHARED_ENDPOINTS = frozenset(
    {"pools.set_pool", "pools.delete_pool", "ui_pools.set_pool", "ui_pools.delete_pool"}
)
"""Routes that change what every project shares (pools): a token without globs's only."""

MISSING: dict[str, str] = {
    "attempt_id": "no attempt {}",
    "session_id": "no session {}",
    "schedule_id": "schedule {} does not exist",
    "workflow_id": "workflow {} does not exist",
    "delivery_id": "no notification delivery {}",
    "trigger_id": "trigger {} does not exist",
}
"""What a route answers (404) for an id of each kind that does not exist, by the name of
the path argument: a limited token gets the same for another project's."""


@dataclass(frozen=True)
class VisibleProjects:
    """The projects a limited token covers, by id (for rows that point at a project) and
    by name (for rows that name one: the audit log)."""

    ids: frozenset[int]
    names: frozenset[str]


def current_identity() -> Identity | None:
    """The identity of the request's token (a REST token or the UI's session); None when
    the server takes no tokens or the path is open."""
    identity: Identity | None = g.get("identity") or g.get("ui_identity")
    return identity


def limited_identity() -> Identity | None:
    """The request's identity if its token is limited to projects, else None."""
    identity = current_identity()
    return identity if identity is not None and identity.projects else None


def visible_projects() -> VisibleProjects | None:
    """The projects this request's token covers; None: every project (no limit).

    Each project's name is matched against the token's globs, and the answer kept by the
    process for :data:`VISIBLE_SECONDS` for every token of the same globs: a project pushed
    meanwhile shows in their lists within that time (at once in the process that pushed
    it). Keeping it cannot show a project the globs do not cover: a project keeps its id
    and its name for good."""
    identity = limited_identity()
    if identity is None:
        return None
    known: VisibleProjects | None = g.get(VISIBLE_KEY)
    if known is not None:
        return known
    cache: dict[tuple[str, ...], tuple[float, VisibleProjects]]
    cache = current_app.extensions.setdefault(VISIBLE_CACHE_KEY, {})
    clock = time.monotonic()
    kept = cache.get(identity.projects)
    if kept is not None and clock - kept[0] < VISIBLE_SECONDS:
        known = kept[1]
    else:
        with read_connection() as conn:
            rows = conn.execute(select(projects.c.id, projects.c.name)).all()
        covered = [(int(row.id), str(row.name)) for row in rows if identity.covers(row.name)]
        known = VisibleProjects(
            frozenset(project_id for project_id, _ in covered),
            frozenset(name for _, name in covered),
        )
        if len(cache) >= VISIBLE_CACHE_MAX:
            cache.clear()
        cache[identity.projects] = (clock, known)
    setattr(g, VISIBLE_KEY, known)
    return known


def forget_visible() -> None:
    """Match every project against the globs again at the next request (this process
    pushed one: it shows at once here, and within :data:`VISIBLE_SECONDS` elsewhere)."""
    current_app.extensions.pop(VISIBLE_CACHE_KEY, None)


def visible_ids() -> frozenset[int] | None:
    """The ids of :func:`visible_projects`; None: every project."""
    visible = visible_projects()
    return visible.ids if visible is not None else None


def require_project(name: str, missing: str) -> None:
    """NotFound with ``missing`` (what a project that does not exist gets) unless the
    request's token covers project ``name``."""
    identity = limited_identity()
    if identity is not None and not identity.covers(name):
        mark_refused()
        raise NotFound(missing)


def check_scope() -> None:
    """Before a route: 404 for a project, or a thing of a project, that the request's
    token does not cover; 403 for a limited token managing tokens, changing a pool or
    pushing a project it does not cover."""
    identity = limited_identity()
    if identity is None:
        return
    try:
        _check_path(identity)
    except (ApiProblem, NotFound):
        mark_refused()
        raise


def _check_path(identity: Identity) -> None:
    endpoint = request.endpoint or ""
    if endpoint.partition(".")[0] in TOKEN_BLUEPRINTS:
        raise ApiProblem(
            403,
            f"token {identity.name} is limited to projects "
            f"({', '.join(identity.projects)}): only an admin token without project globs "
            "may manage tokens",
        )
    if endpoint in SHARED_ENDPOINTS:
        raise ApiProblem(
            403,
            f"token {identity.name} is limited to projects "
            f"({', '.join(identity.projects)}): only an admin token without project globs "
            "may change pools, which every project shares",
        )
    args = request.view_args or {}
    name = args.get("name")
    if isinstance(name, str) and not identity.covers(name):
        if endpoint == "projects.push_project":
            raise ApiProblem(
                403,
                f"token {identity.name} may not push project {name!r}: it is limited to "
                f"projects {', '.join(identity.projects)}",
            )
        raise NotFound(f"project {name!r} does not exist")
    for argument in OWNER_QUERIES:
        value = args.get(argument)
        if not isinstance(value, int):
            continue
        with read_connection() as conn:
            owner = project_of(conn, argument, value)
        if owner is not None and not identity.covers(owner):
            raise NotFound(MISSING[argument].format(value))
