"""Firing triggers: starting the triggered workflow's session once per event (an upstream
session that succeeded, a webhook delivery), in the caller's transaction."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection

from tickwork.shared.errors import Conflict, InvalidInput, NotFound, TickworkError
from tickwork.shared.store.sessions import AttemptFacts
from tickwork.shared.store.sql import insert_ignoring_conflict
from tickwork.shared.store.starts import StartResult, start_attempt
from tickwork.shared.store.tables import projects, trigger_firings, triggers
from tickwork.shared.store.triggers import AFTER, TriggerRow, select_triggers, trigger_row

TRIGGERED_ATTEMPT = "trigger"
"""The name of an attempt a trigger started."""
MAX_ERROR_CHARS = 500
_t = triggers.c


def fire_after(conn: Connection, upstream: AttemptFacts, now: datetime) -> int:
    """Start the sessions of the workflows waiting for the succeeded attempt's workflow;
    how many started. A trigger that cannot start (its workflow is gone) records why."""
    waiting = conn.execute(
        select_triggers().where(
            _t.kind == AFTER,
            _t.upstream_project == upstream.project,
            _t.upstream_workflow == upstream.workflow_name,
            _t.paused_at.is_(None),
            projects.c.deleted_at.is_(None),
        )
    ).all()
    started = 0
    for found in waiting:
        trigger = trigger_row(found)
        params = {
            "trigger": {
                "kind": AFTER,
                "project": upstream.project,
                "workflow": upstream.workflow_name,
                "session_id": upstream.session_id,
                "session_time": upstream.session_time.isoformat(),
                "attempt_id": upstream.id,
            }
        }
        result = fire(
            conn,
            trigger,
            event_key=f"session:{upstream.session_id}",
            session_time=upstream.session_time,
            params=params,
            now=now,
        )
        started += result is not None and result.created
    return started


def fire(
    conn: Connection,
    trigger: TriggerRow,
    *,
    event_key: str,
    session_time: datetime | None,
    params: dict[str, Any],
    now: datetime,
) -> StartResult | None:
    """Start ``trigger``'s workflow for the event ``event_key``, once: the same event again
    gives the attempt it started. None (and the reason recorded) when it cannot start."""
    done = conn.execute(
        sa.select(trigger_firings.c.attempt_id, trigger_firings.c.session_id).where(
            trigger_firings.c.trigger_id == trigger.id, trigger_firings.c.event_key == event_key
        )
    ).first()
    if done is not None and done.attempt_id is not None:
        return StartResult(int(done.attempt_id), int(done.session_id), created=False)
    savepoint = conn.begin_nested()
    try:
        result = start_attempt(
            conn,
            project=trigger.project,
            workflow=trigger.workflow,
            session_time=session_time,
            params=params,
            idempotency_key=f"trigger:{trigger.id}:{event_key}",
            now=now,
            attempt_name=TRIGGERED_ATTEMPT,
        )
        insert_ignoring_conflict(
            conn,
            trigger_firings,
            {
                "trigger_id": trigger.id,
                "event_key": event_key,
                "attempt_id": result.attempt_id,
                "session_id": result.session_id,
                "fired_at": now,
            },
        )
        savepoint.commit()
    except (NotFound, InvalidInput, Conflict) as exc:
        savepoint.rollback()
        _record(conn, trigger.id, error=_reason(exc))
        return None
    _record(conn, trigger.id, fired_at=now, attempt_id=result.attempt_id)
    return result


def _reason(exc: TickworkError) -> str:
    return str(exc)[:MAX_ERROR_CHARS] or type(exc).__name__


def _record(
    conn: Connection,
    trigger_id: int,
    *,
    fired_at: datetime | None = None,
    attempt_id: int | None = None,
    error: str | None = None,
) -> None:
    values: dict[str, Any] = {"last_error": error}
    if fired_at is not None:
        values.update(
            last_fired_at=fired_at, last_attempt_id=attempt_id, fired_count=_t.fired_count + 1
        )
    conn.execute(sa.update(triggers).where(_t.id == trigger_id).values(**values))
