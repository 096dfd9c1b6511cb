"""The header's search box: ``/ui/search?q=`` lists the projects, workflows, session and
attempt it finds, by kind, and goes straight to the page when there is one to go to (the
attempt a number names, else the last attempt of the session it names, or the only match).

``format=json`` answers the same records as JSON, for scripts.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from tickwork.services.api.database import read_connection
from tickwork.services.api.reads.search import QUERY_LIMIT, SearchResults, search
from tickwork.services.api.scope import visible_ids

blueprint = Blueprint("ui_search", __name__, url_prefix="/ui")


@blueprint.get("/search")
def search_page() -> Response | str | tuple[str, int]:
    """What the search box found, or the page it found."""
    text = request.args.get("q", "").strip()
    if len(text) > QUERY_LIMIT:
        message = f"q: at most {QUERY_LIMIT} characters"
        return render_template("ui/search.html", results=None, problem=message), 400
    with read_connection() as conn:
        results = search(conn, text, project_ids=visible_ids())
    if request.args.get("format") == "json":
        return jsonify(_as_json(results))
    target = _straight_to(results)
    if target is not None:
        return redirect(target, code=303)
    return render_template("ui/search.html", results=results, problem=None)


def _straight_to(results: SearchResults) -> str | None:
    """The page a search leads to without a list: the attempt its number names, else the
    last attempt of the session it names, else its only match."""
    if results.attempt is not None:
        return f"/ui/attempts/{results.attempt.id}"
    session = results.session
    if session is not None and session.last_attempt is not None:
        return f"/ui/attempts/{session.last_attempt.id}"
    if results.count != 1:
        return None
    if results.projects:
        return url_for("ui_projects.project", name=results.projects[0])
    if results.workflows:
        found = results.workflows[0]
        return url_for("ui_projects.workflow", name=found.project, workflow=found.name)
    return None


def _as_json(results: SearchResults) -> dict[str, Any]:
    attempt, session = results.attempt, results.session
    return {
        "query": results.query,
        "projects": results.projects,
        "workflows": [{"project": w.project, "name": w.name} for w in results.workflows],
        "attempt_id": None if attempt is None else str(attempt.id),
        "session_id": None if session is None else str(session.id),
        "more_projects": results.more_projects,
        "more_workflows": results.more_workflows,
    }
