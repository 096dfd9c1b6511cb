"""Triggers in the store: kept from each workflow's ``trigger:`` on push, paused and
listed here, fired once per event by :mod:`tickwork.shared.store.trigger_firing`:

- ``after``: when an attempt succeeds, ``fire_after`` starts a session of every
  workflow waiting for it (not paused), in the transaction that records the success:
  one session per upstream session (a ``trigger_firings`` row under a unique key, and the
  start's idempotency key), with the upstream's session time and ``${trigger.*}`` params.
  A retry of the upstream session that succeeds again starts nothing more.
- ``webhook``: ``fire`` starts a session for a signed call (the API checks the
  signature), once per delivery id.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection

from tickwork.shared.domain.triggers import TriggerSpec
from tickwork.shared.domain.workflow import WorkflowDefinition
from tickwork.shared.errors import InvalidInput, NotFound, Problem
from tickwork.shared.store.tables import projects, trigger_firings, triggers

AFTER, WEBHOOK = "after", "webhook"
_t = triggers.c


@dataclass(frozen=True)
class TriggerRow:
    id: int
    project_id: int
    project: str
    workflow: str
    kind: str
    upstream_project: str | None
    upstream_workflow: str | None
    hook_name: str | None
    config: dict[str, Any]
    paused_at: datetime | None
    fired_count: int
    last_fired_at: datetime | None
    last_attempt_id: int | None
    last_error: str | None


def replace_triggers(
    conn: Connection,
    project_id: int,
    project: str,
    workflows: Mapping[str, WorkflowDefinition],
    now: datetime,
) -> None:
    """The project's triggers become those its workflows declare: new ones are added,
    changed ones updated (a paused one stays paused), others removed."""
    wanted: dict[tuple[str, str], dict[str, Any]] = {}
    hooks: dict[str, str] = {}
    for definition in sorted(workflows.values(), key=lambda d: d.name):
        if definition.trigger is None:
            continue
        spec = TriggerSpec.from_config(definition.trigger)
        for upstream in spec.after:
            row = {
                "kind": AFTER,
                "upstream_project": upstream.project or project,
                "upstream_workflow": upstream.workflow,
                "hook_name": None,
                "config": definition.trigger,
            }
            wanted[(definition.name, upstream.key(project))] = row
        if spec.webhook is not None:
            other = hooks.setdefault(spec.webhook.name, definition.name)
            if other != definition.name:
                raise InvalidInput(
                    [
                        Problem(
                            f"{definition.name}.dig",
                            None,
                            f"webhook {spec.webhook.name!r} is declared by {other}.dig too: "
                            "a project's webhooks have names of their own",
                        )
                    ]
                )
            row = {
                "kind": WEBHOOK,
                "upstream_project": None,
                "upstream_workflow": None,
                "hook_name": spec.webhook.name,
                "config": definition.trigger,
            }
            wanted[(definition.name, f"webhook:{spec.webhook.name}")] = row
    existing = {
        (str(r.workflow_name), str(r.key)): int(r.id)
        for r in conn.execute(
            sa.select(_t.id, _t.workflow_name, _t.key).where(_t.project_id == project_id)
        )
    }
    gone = [i for k, i in existing.items() if k not in wanted]
    if gone:
        conn.execute(sa.delete(triggers).where(_t.id.in_(gone)))
    for (workflow, key), values in wanted.items():
        if (workflow, key) in existing:
            conn.execute(
                sa.update(triggers).where(_t.id == existing[(workflow, key)]).values(**values)
            )
        else:
            conn.execute(
                sa.insert(triggers).values(
                    project_id=project_id,
                    workflow_name=workflow,
                    key=key,
                    created_at=now,
                    fired_count=0,
                    **values,
                )
            )


def select_triggers() -> sa.Select[Any]:
    return sa.select(triggers, projects.c.name.label("project")).join(
        projects, projects.c.id == _t.project_id
    )


def trigger_row(row: Any) -> TriggerRow:
    m = row._mapping
    return TriggerRow(
        int(m["id"]),
        int(m["project_id"]),
        m["project"],
        m["workflow_name"],
        m["kind"],
        m["upstream_project"],
        m["upstream_workflow"],
        m["hook_name"],
        m["config"],
        m["paused_at"],
        m["fired_count"],
        m["last_fired_at"],
        m["last_attempt_id"],
        m["last_error"],
    )


def list_triggers(
    conn: Connection, *, project_ids: list[int] | None = None, project: str | None = None
) -> list[TriggerRow]:
    query = select_triggers().where(projects.c.deleted_at.is_(None)).order_by(_t.id)
    if project_ids is not None:
        query = query.where(_t.project_id.in_(project_ids))
    if project is not None:
        query = query.where(projects.c.name == project)
    return [trigger_row(r) for r in conn.execute(query)]


def get_trigger(conn: Connection, trigger_id: int) -> TriggerRow:
    row = conn.execute(select_triggers().where(_t.id == trigger_id)).first()
    if row is None:
        raise NotFound(f"trigger {trigger_id} does not exist")
    return trigger_row(row)


def set_paused(conn: Connection, trigger_id: int, paused: bool, now: datetime) -> TriggerRow:
    """Pause (nothing fires, and what would have is not caught up later) or resume."""
    get_trigger(conn, trigger_id)
    conn.execute(
        sa.update(triggers).where(_t.id == trigger_id).values(paused_at=now if paused else None)
    )
    return get_trigger(conn, trigger_id)


def find_webhook(conn: Connection, project: str, hook: str) -> TriggerRow | None:
    row = conn.execute(
        select_triggers().where(
            projects.c.name == project,
            projects.c.deleted_at.is_(None),
            _t.kind == WEBHOOK,
            _t.hook_name == hook,
        )
    ).first()
    return None if row is None else trigger_row(row)


def list_firings(conn: Connection, trigger_id: int, limit: int = 20) -> list[dict[str, Any]]:
    """The trigger's latest firings: what fired (the event), when, what it started."""
    f = trigger_firings.c
    query = (
        sa.select(f.event_key, f.attempt_id, f.session_id, f.fired_at)
        .where(f.trigger_id == trigger_id)
        .order_by(f.id.desc())
        .limit(limit)
    )
    return [dict(r._mapping) for r in conn.execute(query)]
