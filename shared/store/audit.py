"""The audit log: who changed what, from where, when, and how it ended.

One row per change asked of the API or the web UI (refused ones too: a 401 or 403 on an
action) and per retention pass that removed something (actor ``system``). A change that
commits writes its row in its own transaction, so the two stand or fall together; a
change refused or failed writes its row on its own. Rows are only ever inserted: nothing
of the API updates or deletes one, and retention removes them after their own, longer
setting (``TICKWORK_AUDIT_RETENTION``, 400 days by default).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, insert, select

from tickwork.shared.store.dialects import dialect_of
from tickwork.shared.store.paging import fetch_keyset_page
from tickwork.shared.store.tables import audit_events

SYSTEM_ACTOR = "system"
"""The actor of what the services do by themselves (retention)."""
MAX_TARGET = 512
MAX_USER_AGENT = 256


@dataclass(frozen=True)
class AuditEvent:
    """One change, as the audit log keeps it."""

    at: datetime
    actor: str
    action: str
    target: str
    project: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    client_address: str | None = None
    user_agent: str | None = None
    status: int = 200
    outcome: str = "ok"
    id: int | None = None


@dataclass(frozen=True)
class AuditFilters:
    """What ``GET /api/audit`` and ``tickwork audit`` may ask for."""

    since: datetime | None = None
    until: datetime | None = None
    actor: str | None = None
    action: str | None = None
    project: str | None = None
    projects: frozenset[str] | None = None
    """Only events of these projects (what an admin token limited to projects sees: not
    the events of no project, such as tokens'); None: every event."""


_INSERT_EVENT = insert(audit_events)
"""Made once: each event binds its values to it, so it is not built again per change."""


def record(conn: Connection, event: AuditEvent) -> None:
    """Append ``event`` to the log."""
    conn.execute(
        _INSERT_EVENT,
        {
            "at": event.at,
            "actor": event.actor[:80],
            "action": event.action[:64],
            "target": event.target[:MAX_TARGET],
            "project": event.project[:255] if event.project is not None else None,
            "params": event.params,
            "client_address": (event.client_address or None) and event.client_address[:64],
            "user_agent": (event.user_agent or None) and event.user_agent[:MAX_USER_AGENT],
            "status": event.status,
            "outcome": event.outcome,
        },
    )


def list_events(
    conn: Connection, where: AuditFilters, *, after: int | None, limit: int
) -> tuple[list[AuditEvent], int | None]:
    """Events matching ``where``, newest first, after the id ``after`` (a cursor); and
    the id to continue after (None: the last page)."""
    query = select(audit_events)
    if where.since is not None:
        query = query.where(audit_events.c.at >= where.since)
    if where.until is not None:
        query = query.where(audit_events.c.at < where.until)
    if where.actor is not None:
        query = query.where(audit_events.c.actor == where.actor)
    if where.action is not None:
        query = query.where(audit_events.c.action == where.action)
    if where.project is not None:
        query = query.where(audit_events.c.project == where.project)
    if where.projects is not None:
        query = query.where(audit_events.c.project.in_(sorted(where.projects)))
    page = fetch_keyset_page(conn, query, audit_events.c.id, after=after, limit=limit)
    events = [
        AuditEvent(
            at=row.at,
            actor=row.actor,
            action=row.action,
            target=row.target,
            project=row.project,
            params=dict(row.params or {}),
            client_address=row.client_address,
            user_agent=row.user_agent,
            status=row.status,
            outcome=row.outcome,
            id=int(row.id),
        )
        for row in page.rows
    ]
    return events, page.next_after


def prune_audit_batch(conn: Connection, cutoff: datetime, limit: int) -> tuple[Counter[str], bool]:
    """Delete up to ``limit`` events older than ``cutoff``, oldest first; the count and
    whether more may be left."""
    ids = [
        int(row.id)
        for row in conn.execute(
            select(audit_events.c.id)
            .where(audit_events.c.at < cutoff)
            .order_by(audit_events.c.id)
            .limit(limit)
        )
    ]
    if not ids:
        return Counter(), False
    removed = conn.execute(
        delete(audit_events).where(dialect_of(conn).in_ids(audit_events.c.id, ids))
    )
    return Counter({"audit_events": removed.rowcount}), len(ids) == limit
