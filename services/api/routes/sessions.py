"""Sessions: one per project, workflow and session time, each with its last attempt."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from apiflask import APIBlueprint
from flask import Response
from pydantic import BaseModel, Field

from tickwork.services.api.database import read_connection
from tickwork.services.api.filters import RunsQuery
from tickwork.services.api.paging import (
    PageQuery,
    cursor_after,
    encode_cursor,
    next_cursor,
    page_limit,
)
from tickwork.services.api.responses import json_response
from tickwork.services.api.routes.attempts import AttemptOut, AttemptPage, attempt_item
from tickwork.shared.store import history
from tickwork.shared.store.history import SessionView

blueprint = APIBlueprint("sessions", __name__, tag="Sessions")


class SessionOut(BaseModel):
    """One session and its last attempt."""

    id: str
    session_uuid: str
    session_time: datetime = Field(description="In the workflow's time zone when known.")
    project: str
    project_id: str
    workflow: str
    schedule_id: str | None
    created_at: datetime
    last_attempt: AttemptOut | None


class SessionPage(BaseModel):
    """A page of sessions, newest first."""

    items: list[SessionOut]
    next_cursor: str | None


class SessionsQuery(RunsQuery):
    """Filters of the session list (``state``: the last attempt's)."""


def session_item(session: SessionView) -> dict[str, Any]:
    """The JSON of a session (ids as strings)."""
    last = session.last_attempt
    attempt = None if last is None else attempt_item(last)
    return {
        "id": str(session.id),
        "session_uuid": session.session_uuid,
        # In the zone of the last attempt's workflow, as that attempt shows it.
        "session_time": session.session_time if attempt is None else attempt["session_time"],
        "project": session.project_name,
        "project_id": str(session.project_id),
        "workflow": session.workflow_name,
        "schedule_id": None if session.schedule_id is None else str(session.schedule_id),
        "created_at": session.created_at,
        "last_attempt": attempt,
    }


@blueprint.get("/api/sessions")
@blueprint.input(SessionsQuery, location="query", arg_name="query")
@blueprint.output(SessionPage)
def list_sessions(query: SessionsQuery) -> Response:
    """Sessions, newest first, each with its last attempt."""
    after = cursor_after(query)
    filters = query.run_filters()
    with read_connection() as conn:
        page = history.list_sessions(conn, where=filters, after=after, limit=page_limit(query))
    cursor = next_cursor(page.next_after)
    return json_response({"items": [session_item(s) for s in page.items], "next_cursor": cursor})


@blueprint.get("/api/sessions/<id:session_id>")
@blueprint.output(SessionOut)
@blueprint.doc(responses={404: "No such session"})
def get_session(session_id: int) -> dict[str, Any]:
    """One session with its last attempt."""
    with read_connection() as conn:
        return session_item(history.get_session(conn, session_id))


@blueprint.get("/api/sessions/<id:session_id>/attempts")
@blueprint.input(PageQuery, location="query", arg_name="query")
@blueprint.output(AttemptPage)
@blueprint.doc(responses={404: "No such session"})
def session_attempts(session_id: int, query: PageQuery) -> dict[str, Any]:
    """The attempts of a session, newest first."""
    after = cursor_after(query)
    limit = page_limit(query)
    with read_connection() as conn:
        found = history.list_session_attempts(conn, session_id)
    if after is not None:
        found = [a for a in found if a.id < after]
    page, rest = found[:limit], found[limit:]
    cursor = encode_cursor(page[-1].id) if rest else None
    return {"items": [attempt_item(a) for a in page], "next_cursor": cursor}
