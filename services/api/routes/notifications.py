"""Notification rules and their deliveries: what was sent where, how it went, and a test
send of one rule.

- ``GET /api/notifications``: deliveries, newest first (``failed=true``: those that failed
  their last try or were given up), of the projects the token covers;
- ``GET /api/notifications/{id}``: one delivery;
- ``GET /api/projects/{name}/notification-rules``: a project's rules, as pushed in its
  ``notifications.yml``;
- ``POST /api/projects/{name}/notification-rules/{rule}/test``: a sample event for that
  rule, sent by the executor's notifier like any other (an operator's).
"""

from __future__ import annotations

import uuid
from typing import Any

from apiflask import APIBlueprint
from pydantic import BaseModel, Field

from tickwork.services.api.database import read_connection, write_transaction
from tickwork.services.api.paging import PageQuery, cursor_after, next_cursor, page_limit
from tickwork.services.api.scope import visible_ids
from tickwork.services.api.times import format_time
from tickwork.shared.clock import utc_now
from tickwork.shared.domain.notifications import Event, NotificationRule
from tickwork.shared.errors import NotFound
from tickwork.shared.store import notifications as store
from tickwork.shared.store.notifications import DeliveryRow
from tickwork.shared.store.projects import project_id_named

blueprint = APIBlueprint("notifications", __name__, tag="Notifications")


class DeliveryQuery(PageQuery):
    """Filters of the deliveries."""

    failed: bool = Field(False, description="Only deliveries whose last try failed.")
    project: str | None = Field(None, max_length=255, description="Project name.")
    rule: str | None = Field(None, max_length=64, description="Rule name.")


class DeliveryOut(BaseModel):
    """One delivery: a rule told of an event, and how sending it went."""

    id: str
    project: str
    rule: str
    event: str
    workflow: str | None
    attempt_id: str | None
    target: str = Field(description="webhook, slack or mail (never the URL: it may be secret).")
    state: str = Field(description="pending, sending, sent or failed (given up).")
    tries: int
    last_status: int | None
    last_error: str | None
    possible_duplicate: bool = Field(
        description="Sent again after a send whose outcome was not recorded: the target "
        "may have it twice (the same X-Tickwork-Delivery)."
    )
    created_at: str
    next_try_at: str | None
    sent_at: str | None


class DeliveryPage(BaseModel):
    items: list[DeliveryOut]
    next_cursor: str | None


class RuleOut(BaseModel):
    """A rule of the project's notifications.yml."""

    name: str
    when: list[str]
    workflows: list[str] | None
    longer_than_seconds: int | None
    target: str


class RuleList(BaseModel):
    items: list[RuleOut]


def delivery_item(row: DeliveryRow) -> dict[str, Any]:
    return {
        "id": str(row.id),
        "project": row.project,
        "rule": row.rule_name,
        "event": row.event,
        "workflow": row.workflow_name,
        "attempt_id": None if row.attempt_id is None else str(row.attempt_id),
        "target": str(row.target.get("kind", "")),
        "state": row.state,
        "tries": row.tries,
        "last_status": row.last_status,
        "last_error": row.last_error,
        "possible_duplicate": row.possible_duplicate,
        "created_at": format_time(row.created_at),
        "next_try_at": format_time(row.next_try_at) if row.state == store.PENDING else None,
        "sent_at": None if row.sent_at is None else format_time(row.sent_at),
    }


def rule_item(rule: NotificationRule) -> dict[str, Any]:
    return {
        "name": rule.name,
        "when": [e.value for e in rule.events],
        "workflows": None if rule.workflows is None else list(rule.workflows),
        "longer_than_seconds": rule.longer_than_seconds,
        "target": rule.target.kind.value,
    }


def read_deliveries(query: DeliveryQuery) -> tuple[list[DeliveryRow], str | None]:
    """A page of deliveries the query asks for, of the projects the token covers, and the
    cursor of the next page (the REST list and the UI's page read this)."""
    visible = visible_ids()
    limit = page_limit(query)
    with read_connection() as conn:
        ids: list[int] | None = None if visible is None else sorted(visible)
        if query.project is not None:
            project_id = project_id_named(conn, query.project)
            found = [] if project_id is None else [project_id]
            ids = found if visible is None else [i for i in found if i in visible]
        rows = store.list_deliveries(
            conn,
            project_ids=ids,
            failed_only=query.failed,
            rule=query.rule,
            limit=limit + 1,
            before_id=cursor_after(query),
        )
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, next_cursor(rows[-1].id if more and rows else None)


@blueprint.get("/api/notifications")
@blueprint.input(DeliveryQuery, location="query", arg_name="query")
@blueprint.output(DeliveryPage)
def list_deliveries(query: DeliveryQuery) -> dict[str, Any]:
    """Notification deliveries, newest first."""
    rows, cursor = read_deliveries(query)
    return {"items": [delivery_item(r) for r in rows], "next_cursor": cursor}


@blueprint.get("/api/notifications/<id:delivery_id>")
@blueprint.output(DeliveryOut)
def get_delivery(delivery_id: int) -> dict[str, Any]:
    """One delivery."""
    with read_connection() as conn:
        row = store.get_delivery(conn, delivery_id)
    if row is None:
        raise NotFound(f"no notification delivery {delivery_id}")
    return delivery_item(row)


@blueprint.get("/api/projects/<name>/notification-rules")
@blueprint.output(RuleList)
def list_rules(name: str) -> dict[str, Any]:
    """The project's notification rules (its notifications.yml, as last pushed)."""
    with read_connection() as conn:
        project_id = _project(conn, name)
        rules = store.project_rules(conn, project_id)
    return {"items": [rule_item(r) for r in rules]}


@blueprint.post("/api/projects/<name>/notification-rules/<rule>/test")
@blueprint.output(DeliveryOut, status_code=201)
def test_rule(name: str, rule: str) -> dict[str, Any]:
    """Send a sample event through one rule; the delivery it made (sent within seconds
    by the executor's notifier: read it again to see how it went)."""
    now = utc_now()
    key = f"test:{uuid.uuid4()}"
    with write_transaction() as conn:
        project_id = _project(conn, name)
        payload = {
            "event": Event.TEST.value,
            "project": name,
            "workflow": None,
            "message": f"a test of notification rule {rule!r}",
            "at": format_time(now),
        }
        added = store.record_event(
            conn,
            project_id=project_id,
            workflow_name=None,
            event=Event.TEST,
            event_key=key,
            payload=payload,
            now=now,
            only_rule=rule,
        )
        if not added:  # the key is new: only a missing rule adds nothing
            raise NotFound(f"project {name!r} has no notification rule {rule!r}")
        row = store.get_delivery_by_key(conn, project_id, rule, key)
    assert row is not None
    return delivery_item(row)


def _project(conn: Any, name: str) -> int:
    project_id = project_id_named(conn, name)
    if project_id is None:
        raise NotFound(f"project {name!r} does not exist")
    return project_id
