"""SLA deadlines of attempts and the alerts recorded when one is missed.

``attempts.sla_deadline`` is set when an attempt with an ``sla:`` starts. A deadline
stays on the attempt once it fired (``sla_fired_at`` set); an attempt that ended before
its deadline has the deadline cleared once it passes, so the executor's look-up on
``ix_attempts_sla_deadline`` only ever walks attempts still being watched and the
(rare) ones that missed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, select

from tickwork.shared.domain.states import AttemptState, TaskState
from tickwork.shared.store.partitions import AttemptSet, restrict
from tickwork.shared.store.sql import insert_ignoring_conflict
from tickwork.shared.store.tables import alerts, attempts, tasks


@dataclass(frozen=True)
class AlertRow:
    """One alert about an attempt."""

    id: int
    attempt_id: int
    kind: str
    message: str
    created_at: datetime


def set_sla_deadline(conn: Connection, attempt_id: int, deadline: datetime) -> None:
    """Record when an attempt must be done by (when it starts)."""
    conn.execute(attempts.update().where(attempts.c.id == attempt_id).values(sla_deadline=deadline))


def select_missed_slas(
    conn: Connection, now: datetime, limit: int, *, among: AttemptSet = None
) -> list[tuple[int, datetime]]:
    """``(id, deadline)`` of RUNNING attempts whose deadline is at or before ``now`` and
    that have not fired yet, earliest deadline first; only those in ``among`` if given."""
    query = select(attempts.c.id, attempts.c.sla_deadline).where(
        attempts.c.sla_deadline <= now,
        attempts.c.sla_fired_at.is_(None),
        attempts.c.state == AttemptState.RUNNING.value,
    )
    query = restrict(query, attempts.c.id, among)
    query = query.order_by(attempts.c.sla_deadline, attempts.c.id).limit(limit)
    return [(int(row.id), row.sla_deadline) for row in conn.execute(query)]


def claim_missed_sla(conn: Connection, attempt_id: int, now: datetime) -> bool:
    """Mark an attempt's SLA as fired; True for the one caller that did it.

    Guarded on ``sla_fired_at IS NULL`` and the attempt still RUNNING: of two executors
    that found the same attempt, the second one's update matches nothing (on PostgreSQL it
    waits for the first one's commit, then finds the row already claimed).
    """
    result = conn.execute(
        attempts.update()
        .where(
            attempts.c.id == attempt_id,
            attempts.c.sla_fired_at.is_(None),
            attempts.c.state == AttemptState.RUNNING.value,
        )
        .values(sla_fired_at=now)
    )
    return result.rowcount == 1


def clear_met_slas(conn: Connection, now: datetime, *, among: AttemptSet = None) -> int:
    """Clear the passed deadlines of attempts that are no longer running and never fired
    (they ended in time, or were killed); only those in ``among`` if given; how many."""
    statement = attempts.update().where(
        attempts.c.sla_deadline <= now,
        attempts.c.sla_fired_at.is_(None),
        attempts.c.state != AttemptState.RUNNING.value,
    )
    result = conn.execute(restrict(statement, attempts.c.id, among).values(sla_deadline=None))
    return int(result.rowcount)


def insert_alert(
    conn: Connection, attempt_id: int, kind: str, message: str, now: datetime
) -> int | None:
    """Record an alert about an attempt; None if it has one of this ``kind`` already."""
    values = {"attempt_id": attempt_id, "kind": kind, "message": message, "created_at": now}
    return insert_ignoring_conflict(conn, alerts, values)


def list_alerts(conn: Connection, attempt_id: int) -> list[AlertRow]:
    """An attempt's alerts, oldest first."""
    query = (
        select(alerts.c.id, alerts.c.attempt_id, alerts.c.kind, alerts.c.message)
        .add_columns(alerts.c.created_at)
        .where(alerts.c.attempt_id == attempt_id)
        .order_by(alerts.c.id)
    )
    return [
        AlertRow(
            id=int(row.id),
            attempt_id=int(row.attempt_id),
            kind=str(row.kind),
            message=str(row.message),
            created_at=row.created_at,
        )
        for row in conn.execute(query)
    ]


def root_task_id(conn: Connection, attempt_id: int) -> int | None:
    """The id of an attempt's root task, if it has been materialized."""
    query = select(tasks.c.id).where(tasks.c.attempt_id == attempt_id, tasks.c.parent_id.is_(None))
    found = conn.execute(query).scalar_one_or_none()
    return None if found is None else int(found)


def cancel_unfinished_except(
    conn: Connection, attempt_id: int, keep_id: int, now: datetime
) -> list[tuple[int, int]]:
    """End every unfinished task of an attempt but ``keep_id`` as CANCELED.

    Returns the ``(task id, lease token)`` of those that were QUEUED or RUNNING, for
    their agents to be told to stop.
    """
    unfinished = [s.value for s in TaskState if not s.is_terminal]
    in_flight = (TaskState.QUEUED.value, TaskState.RUNNING.value)
    query = select(tasks.c.id, tasks.c.lease_token).where(
        tasks.c.attempt_id == attempt_id, tasks.c.id != keep_id, tasks.c.state.in_(in_flight)
    )
    revoked = [(int(row.id), int(row.lease_token)) for row in conn.execute(query)]
    conn.execute(
        tasks.update()
        .where(
            tasks.c.attempt_id == attempt_id,
            tasks.c.id != keep_id,
            tasks.c.state.in_(unfinished),
        )
        .values(state=TaskState.CANCELED.value, finished_at=now, updated_at=now)
    )
    return revoked
