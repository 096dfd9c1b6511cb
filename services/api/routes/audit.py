"""``GET /api/audit``: the audit log, newest first, for admins (services/api/auth.py
ADMIN_BLUEPRINTS). Nothing of the API changes or deletes a row of it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from apiflask import APIBlueprint
from pydantic import BaseModel, Field

from tickwork.services.api import times
from tickwork.services.api.database import read_connection
from tickwork.services.api.errors import InvalidParameter
from tickwork.services.api.paging import PageQuery, cursor_after, next_cursor, page_limit
from tickwork.services.api.scope import visible_projects
from tickwork.shared.store.audit import AuditEvent, AuditFilters, list_events

blueprint = APIBlueprint("audit", __name__, tag="Audit")


class AuditQuery(PageQuery):
    """Filters of the audit log."""

    since: str | None = Field(None, max_length=64, description="Events at or after (ISO 8601).")
    until: str | None = Field(None, max_length=64, description="Events before (ISO 8601).")
    actor: str | None = Field(None, max_length=80, description="Token name (env:... too).")
    action: str | None = Field(None, max_length=64, description="Such as attempt.kill.")
    project: str | None = Field(None, max_length=255, description="Project name.")

    def filters(self) -> AuditFilters:
        """The store's filters (only the projects the request's token covers);
        InvalidParameter naming ``since`` or ``until`` for a time that is not one, or a
        range ending before it starts."""
        since = None if self.since is None else times.parse_time(self.since, parameter="since")
        until = None if self.until is None else times.parse_time(self.until, parameter="until")
        if since is not None and until is not None and until <= since:
            raise InvalidParameter("until", "must be later than `since`")
        visible = visible_projects()
        names = visible.names if visible is not None else None
        return AuditFilters(since, until, self.actor, self.action, self.project, names)


class AuditEventOut(BaseModel):
    """One change: who, what, where from, and how it ended."""

    id: str
    at: datetime
    actor: str = Field(description="The token's name; system for the services themselves.")
    action: str
    target: str
    project: str | None
    params: dict[str, Any] = Field(description="What was sent, secrets masked.")
    client_address: str | None
    user_agent: str | None
    status: int
    outcome: str = Field(description="ok, refused (401/403) or failed.")


class AuditPage(BaseModel):
    """A page of the audit log, newest first."""

    items: list[AuditEventOut]
    next_cursor: str | None


def audit_item(event: AuditEvent) -> dict[str, Any]:
    """The JSON of one event (its id as a string)."""
    return {
        "id": str(event.id),
        "at": event.at,
        "actor": event.actor,
        "action": event.action,
        "target": event.target,
        "project": event.project,
        "params": event.params,
        "client_address": event.client_address,
        "user_agent": event.user_agent,
        "status": event.status,
        "outcome": event.outcome,
    }


@blueprint.get("/api/audit")
@blueprint.input(AuditQuery, location="query", arg_name="query")
@blueprint.output(AuditPage)
def list_audit(query: AuditQuery) -> dict[str, Any]:
    """The audit log, newest first, filtered by time, actor, action and project."""
    filters = query.filters()
    with read_connection() as conn:
        events, after = list_events(
            conn, filters, after=cursor_after(query), limit=page_limit(query)
        )
    return {"items": [audit_item(e) for e in events], "next_cursor": next_cursor(after)}
