"""Notification rules and their deliveries in the store.

A rule is stored when its project is pushed (:func:`replace_rules`). An event writes one
delivery per rule that wants it, in the transaction that makes the event true (an attempt
ending, an SLA firing), under a unique key (project, rule, event key): a crash, a retried
transaction or a second executor never write two. A sender claims a due delivery for a
while (:func:`claim_due`), sends it, and records the outcome (:func:`record_outcome`); a
claim that ran out before its outcome was recorded may have been sent, so the next send is
marked ``possible_duplicate``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection

from tickwork.shared.domain.notifications import Event, NotificationRule
from tickwork.shared.domain.states import AttemptState, TaskState
from tickwork.shared.store.sessions import AttemptFacts, attempt_facts
from tickwork.shared.store.sql import insert_ignoring_conflict
from tickwork.shared.store.tables import (
    attempts,
    notification_deliveries,
    notification_rules,
    projects,
    sessions,
    tasks,
)

PENDING, SENDING, SENT, FAILED = "pending", "sending", "sent", "failed"
MAX_TRIES = 8
"""Sends of one delivery before it is given up as failed."""
FIRST_RETRY_SECONDS = 5.0
MAX_RETRY_SECONDS = 3600.0
MAX_ERROR_CHARS = 500
MAX_FAILED_TASKS = 5

_deliveries = notification_deliveries.c


@dataclass(frozen=True)
class DeliveryRow:
    id: int
    project_id: int
    project: str
    rule_name: str
    event: str
    event_key: str
    workflow_name: str | None
    attempt_id: int | None
    payload: dict[str, Any]
    target: dict[str, Any]
    state: str
    tries: int
    next_try_at: datetime
    last_status: int | None
    last_error: str | None
    possible_duplicate: bool
    created_at: datetime
    sent_at: datetime | None


def replace_rules(
    conn: Connection, project_id: int, rules: Sequence[NotificationRule], now: datetime
) -> None:
    """The project's rules become ``rules``: others are removed, these written."""
    table = notification_rules.c
    names = [rule.name for rule in rules]
    conn.execute(
        sa.delete(notification_rules).where(
            table.project_id == project_id, table.name.not_in(names)
        )
    )
    existing = set(conn.scalars(sa.select(table.name).where(table.project_id == project_id)).all())
    for rule in rules:
        values = {"config": rule.to_config(), "updated_at": now}
        if rule.name in existing:
            conn.execute(
                sa.update(notification_rules)
                .where(table.project_id == project_id, table.name == rule.name)
                .values(**values)
            )
        else:
            conn.execute(
                sa.insert(notification_rules).values(
                    project_id=project_id, name=rule.name, **values
                )
            )


def project_rules(conn: Connection, project_id: int) -> list[NotificationRule]:
    table = notification_rules.c
    query = sa.select(table.config).where(table.project_id == project_id).order_by(table.name)
    return [NotificationRule.from_config(config) for config in conn.scalars(query)]


def record_event(
    conn: Connection,
    *,
    project_id: int,
    workflow_name: str | None,
    event: Event,
    event_key: str,
    payload: dict[str, Any],
    now: datetime,
    attempt_id: int | None = None,
    only_rule: str | None = None,
) -> int:
    """One delivery per rule of the project told of ``event`` for ``workflow_name`` (or
    ``only_rule``, whatever it is told of: a test), unless it exists; how many were new."""
    rows = []
    for rule in project_rules(conn, project_id):
        if only_rule is not None:
            if rule.name != only_rule:
                continue
        elif event not in rule.events or (
            workflow_name is not None and not rule.covers(workflow_name)
        ):
            continue
        rows.append(
            {
                "project_id": project_id,
                "rule_name": rule.name,
                "event": event.value,
                "event_key": event_key,
                "workflow_name": workflow_name,
                "attempt_id": attempt_id,
                "payload": payload,
                "target": rule.target.to_config(),
                "state": PENDING,
                "tries": 0,
                "next_try_at": now,
                "possible_duplicate": False,
                "created_at": now,
            }
        )
    if not rows:
        return 0
    # One statement per rule (a project has few), each telling whether it was new.
    return sum(
        insert_ignoring_conflict(conn, notification_deliveries, row) is not None for row in rows
    )


def _has_rules(conn: Connection, project_id: int) -> bool:
    table = notification_rules.c
    query = sa.select(table.id).where(table.project_id == project_id).limit(1)
    return conn.execute(query).first() is not None


def attempt_payload(facts: AttemptFacts, event: Event, **extra: Any) -> dict[str, Any]:
    """What a delivery says of an attempt's event (no secret: names, ids, times, states)."""
    payload: dict[str, Any] = {
        "event": event.value,
        "project": facts.project,
        "workflow": facts.workflow_name,
        "session_id": facts.session_id,
        "session_time": facts.session_time.isoformat(),
        "attempt_id": facts.id,
        "attempt_name": facts.name,
        "state": facts.state,
    }
    payload.update(extra)
    return payload


def _failed_tasks(conn: Connection, attempt_id: int) -> list[dict[str, Any]]:
    """The first tasks of the attempt that failed, with their errors' messages."""
    query = (
        sa.select(tasks.c.full_name, tasks.c.error)
        .where(
            tasks.c.attempt_id == attempt_id,
            tasks.c.state == TaskState.ERROR.value,
            tasks.c.is_group.is_(False),
        )
        .order_by(tasks.c.id)
        .limit(MAX_FAILED_TASKS)
    )
    found = []
    for name, error in conn.execute(query):
        message = (error or {}).get("message") if isinstance(error, dict) else None
        found.append({"task": name, "message": (message or "")[:MAX_ERROR_CHARS] or None})
    return found


def record_attempt_end(
    conn: Connection, facts: AttemptFacts, state: AttemptState, now: datetime
) -> int:
    """Deliveries for an attempt that just ended: ``failed`` when it failed, ``recovered``
    when it succeeded and the workflow's attempt that ended before it had failed."""
    if state not in (AttemptState.ERROR, AttemptState.SUCCESS):
        return 0
    if not _has_rules(conn, facts.project_id):
        return 0
    attempt_id = facts.id
    if state is AttemptState.ERROR:
        event = Event.FAILED
        payload = attempt_payload(facts, event, failed_tasks=_failed_tasks(conn, attempt_id))
    else:
        previous = conn.execute(
            sa.select(attempts.c.state)
            .join(sessions, sessions.c.id == attempts.c.session_id)
            .where(
                sessions.c.project_id == facts.project_id,
                sessions.c.workflow_name == facts.workflow_name,
                attempts.c.id != attempt_id,
                attempts.c.finished_at.is_not(None),
            )
            .order_by(attempts.c.finished_at.desc(), attempts.c.id.desc())
            .limit(1)
        ).scalar()
        if previous != AttemptState.ERROR.value:
            return 0
        event = Event.RECOVERED
        payload = attempt_payload(facts, event)
    return record_event(
        conn,
        project_id=facts.project_id,
        workflow_name=facts.workflow_name,
        event=event,
        event_key=f"{event.value}:{attempt_id}",
        payload=payload,
        now=now,
        attempt_id=attempt_id,
    )


def record_sla_missed(conn: Connection, attempt_id: int, now: datetime) -> int:
    """Deliveries for an attempt whose SLA fired."""
    facts = attempt_facts(conn, attempt_id)
    if facts is None or not _has_rules(conn, facts.project_id):
        return 0
    return record_event(
        conn,
        project_id=facts.project_id,
        workflow_name=facts.workflow_name,
        event=Event.SLA_MISSED,
        event_key=f"{Event.SLA_MISSED.value}:{attempt_id}",
        payload=attempt_payload(facts, Event.SLA_MISSED),
        now=now,
        attempt_id=attempt_id,
    )


def record_long_runs(conn: Connection, now: datetime) -> int:
    """Deliveries for running attempts older than a ``running_longer`` rule allows."""
    table = notification_rules.c
    found = 0
    for project_id, config in conn.execute(sa.select(table.project_id, table.config)):
        rule = NotificationRule.from_config(config)
        if Event.RUNNING_LONGER not in rule.events or rule.longer_than_seconds is None:
            continue
        since = now - timedelta(seconds=rule.longer_than_seconds)
        query = (
            sa.select(attempts.c.id)
            .join(sessions, sessions.c.id == attempts.c.session_id)
            .where(
                sessions.c.project_id == project_id,
                attempts.c.state == AttemptState.RUNNING.value,
                attempts.c.created_at < since,
            )
        )
        if rule.workflows is not None:
            query = query.where(sessions.c.workflow_name.in_(rule.workflows))
        for attempt_id in conn.scalars(query).all():
            facts = attempt_facts(conn, attempt_id)
            if facts is None:
                continue
            payload = attempt_payload(
                facts, Event.RUNNING_LONGER, longer_than_seconds=rule.longer_than_seconds
            )
            found += record_event(
                conn,
                project_id=project_id,
                workflow_name=facts.workflow_name,
                event=Event.RUNNING_LONGER,
                event_key=f"{Event.RUNNING_LONGER.value}:{attempt_id}",
                payload=payload,
                now=now,
                attempt_id=attempt_id,
                only_rule=rule.name,
            )
    return found


def _select_deliveries() -> sa.Select[Any]:
    return sa.select(notification_deliveries, projects.c.name.label("project")).join(
        projects, projects.c.id == _deliveries.project_id
    )


def _row(row: Any) -> DeliveryRow:
    m = row._mapping
    return DeliveryRow(
        m["id"],
        m["project_id"],
        m["project"],
        m["rule_name"],
        m["event"],
        m["event_key"],
        m["workflow_name"],
        m["attempt_id"],
        m["payload"],
        m["target"],
        m["state"],
        m["tries"],
        m["next_try_at"],
        m["last_status"],
        m["last_error"],
        m["possible_duplicate"],
        m["created_at"],
        m["sent_at"],
    )


def has_due(conn: Connection, now: datetime) -> bool:
    """Whether a delivery may be claimed now (a read: the sender writes only then)."""
    free = sa.or_(_deliveries.claimed_until.is_(None), _deliveries.claimed_until < now)
    query = (
        sa.select(_deliveries.id)
        .where(_deliveries.state.in_((PENDING, SENDING)), _deliveries.next_try_at <= now, free)
        .limit(1)
    )
    return conn.execute(query).first() is not None


def watches_long_runs(conn: Connection) -> bool:
    """Whether any rule is told of ``running_longer`` (a read)."""
    configs = conn.scalars(sa.select(notification_rules.c.config))
    return any(Event.RUNNING_LONGER.value in (config.get("when") or []) for config in configs)


def claim_due(
    conn: Connection, now: datetime, claim_seconds: float, limit: int = 20
) -> list[DeliveryRow]:
    """Claim up to ``limit`` deliveries due now, each for ``claim_seconds`` (the time a
    send may take, and then some); a claim another sender holds is left to it. A delivery
    whose claim ran out unrecorded is claimed again and marked ``possible_duplicate``."""
    free = sa.or_(_deliveries.claimed_until.is_(None), _deliveries.claimed_until < now)
    due = sa.and_(_deliveries.state.in_((PENDING, SENDING)), _deliveries.next_try_at <= now, free)
    candidates = conn.execute(
        sa.select(_deliveries.id, _deliveries.state)
        .where(due)
        .order_by(_deliveries.next_try_at, _deliveries.id)
        .limit(limit)
    ).all()
    claimed: list[int] = []
    until = now + timedelta(seconds=claim_seconds)
    for delivery_id, state in candidates:
        values: dict[str, Any] = {
            "state": SENDING,
            "claimed_until": until,
            "tries": _deliveries.tries + 1,
        }
        if state == SENDING:
            values["possible_duplicate"] = True  # the last claimer may have sent it
        done = conn.execute(
            sa.update(notification_deliveries)
            .where(_deliveries.id == delivery_id, due)
            .values(**values)
        )
        if done.rowcount == 1:
            claimed.append(delivery_id)
    if not claimed:
        return []
    rows = conn.execute(_select_deliveries().where(_deliveries.id.in_(claimed))).all()
    return [_row(row) for row in rows]


def retry_delay(tries: int) -> float:
    """Seconds before the next send after ``tries`` failed ones: 5 s, doubled, at most 1 h."""
    return float(min(FIRST_RETRY_SECONDS * 2 ** max(tries - 1, 0), MAX_RETRY_SECONDS))


def record_outcome(
    conn: Connection,
    delivery: DeliveryRow,
    now: datetime,
    *,
    status: int | None,
    error: str | None,
) -> str:
    """Record how a claimed send went; the delivery's new state."""
    if error is None:
        values: dict[str, Any] = {"state": SENT, "sent_at": now, "last_error": None}
    elif delivery.tries >= MAX_TRIES:
        values = {"state": FAILED}
    else:
        values = {
            "state": PENDING,
            "next_try_at": now + timedelta(seconds=retry_delay(delivery.tries)),
        }
    values.update(
        claimed_until=None,
        last_status=status,
        **({"last_error": error[:MAX_ERROR_CHARS]} if error is not None else {}),
    )
    conn.execute(
        sa.update(notification_deliveries)
        .where(_deliveries.id == delivery.id, _deliveries.state == SENDING)
        .values(**values)
    )
    return str(values["state"])


def list_deliveries(
    conn: Connection,
    *,
    project_ids: Sequence[int] | None = None,
    failed_only: bool = False,
    rule: str | None = None,
    limit: int = 50,
    before_id: int | None = None,
) -> list[DeliveryRow]:
    """Deliveries, newest first; ``failed_only``: those given up on or not sent yet after a
    failed try."""
    query = _select_deliveries().order_by(_deliveries.id.desc()).limit(limit)
    if project_ids is not None:
        query = query.where(_deliveries.project_id.in_(project_ids))
    if failed_only:
        query = query.where(
            sa.or_(
                _deliveries.state == FAILED,
                sa.and_(_deliveries.state != SENT, _deliveries.last_error.is_not(None)),
            )
        )
    if rule is not None:
        query = query.where(_deliveries.rule_name == rule)
    if before_id is not None:
        query = query.where(_deliveries.id < before_id)
    return [_row(row) for row in conn.execute(query)]


def get_delivery(conn: Connection, delivery_id: int) -> DeliveryRow | None:
    row = conn.execute(_select_deliveries().where(_deliveries.id == delivery_id)).first()
    return None if row is None else _row(row)


def get_delivery_by_key(
    conn: Connection, project_id: int, rule_name: str, event_key: str
) -> DeliveryRow | None:
    row = conn.execute(
        _select_deliveries().where(
            _deliveries.project_id == project_id,
            _deliveries.rule_name == rule_name,
            _deliveries.event_key == event_key,
        )
    ).first()
    return None if row is None else _row(row)


def prune_delivery_batch(
    conn: Connection, cutoff: datetime, project_id: int | None, limit: int
) -> tuple[Counter[str], bool]:
    """Delete up to ``limit`` settled deliveries (sent or given up) made before
    ``cutoff``, oldest first; the count and whether more may be left."""
    query = (
        sa.select(_deliveries.id)
        .where(_deliveries.created_at < cutoff, _deliveries.state.in_((SENT, FAILED)))
        .order_by(_deliveries.id)
        .limit(limit)
    )
    if project_id is not None:
        query = query.where(_deliveries.project_id == project_id)
    ids = [int(i) for i in conn.scalars(query)]
    if not ids:
        return Counter(), False
    removed = conn.execute(
        sa.delete(notification_deliveries).where(_deliveries.id.in_(ids))
    ).rowcount
    return Counter({"notification_deliveries": removed}), len(ids) == limit
