"""The executor's SLA pass: attempts not done by their ``sla:`` deadline get its reaction.

When an attempt starts, its deadline is stored with it. A pass (on the executor's
rescan, every second) claims each RUNNING attempt whose deadline has passed, once across
all executors, and then:

- ``alert: true`` records an ``sla`` alert (one per attempt); the project's notification
  rules told of ``sla_missed`` get a delivery either way;
- the ``+tasks`` run as the group ``^sla`` under the root task, beside whatever of the
  attempt still runs; the attempt waits for them, and fails if one fails;
- ``fail: true`` stops the rest of the attempt at once (its unfinished tasks are
  canceled, their agents told to stop) and adds ``^sla^fail``, a ``fail>`` task: the
  attempt ends in error once the ``^sla`` tasks have run, after the root's ``_error``
  handler if it has one.
"""

from __future__ import annotations

import logging
from datetime import datetime

from sqlalchemy import Connection

from tickwork.services.executor.graph import TaskGraph
from tickwork.services.executor.materialize import Placement, materialize_children
from tickwork.shared.domain.params import merge_params
from tickwork.shared.domain.sla import ALERT_KIND, SLA_FAIL_TASK_NAME, SlaSpec
from tickwork.shared.domain.states import TaskState
from tickwork.shared.domain.workflow import TaskSpec, WorkflowDefinition
from tickwork.shared.store import sla as sla_store
from tickwork.shared.store import tasks as task_store
from tickwork.shared.store.notifications import record_sla_missed
from tickwork.shared.store.partitions import AttemptSet
from tickwork.shared.store.projects import load_workflow_definition
from tickwork.shared.store.sessions import AttemptRow, get_attempt

log = logging.getLogger(__name__)

SLA_BATCH = 100
"""Missed SLAs one pass reacts to, at most (the next pass takes the rest)."""


def set_deadline(
    conn: Connection, attempt: AttemptRow, definition: WorkflowDefinition, started_at: datetime
) -> None:
    """Store when a starting attempt must be done by, if its workflow has an ``sla:``."""
    if definition.sla is None:
        return
    sla = SlaSpec.from_config(definition.sla)
    deadline = sla.deadline(started_at, attempt.timezone)
    sla_store.set_sla_deadline(conn, attempt.id, deadline)
    log.debug("attempt sla deadline attempt_id=%d deadline=%s", attempt.id, deadline.isoformat())


def fire_missed_slas(
    conn: Connection, graph: TaskGraph, now: datetime, among: AttemptSet
) -> tuple[int, list[tuple[int, int]]]:
    """React to every missed SLA this executor claims; how many, and the in-flight
    ``(task id, lease token)`` pairs to revoke after the commit."""
    sla_store.clear_met_slas(conn, now, among=among)
    fired = 0
    revoked: list[tuple[int, int]] = []
    for attempt_id, deadline in sla_store.select_missed_slas(conn, now, SLA_BATCH, among=among):
        if sla_store.claim_missed_sla(conn, attempt_id, now):
            revoked += _react(conn, graph, get_attempt(conn, attempt_id), deadline, now)
            fired += 1
    return fired, revoked


def _react(
    conn: Connection, graph: TaskGraph, attempt: AttemptRow, deadline: datetime, now: datetime
) -> list[tuple[int, int]]:
    definition = load_workflow_definition(conn, attempt.workflow_definition_id)
    root_id = sla_store.root_task_id(conn, attempt.id)
    if definition.sla is None or root_id is None:
        return []
    sla = SlaSpec.from_config(definition.sla)
    message = (
        f"SLA missed: workflow {attempt.workflow_name} was not done by "
        f"{deadline.isoformat(timespec='seconds')} ({sla.describe()})"
    )
    log.warning("%s attempt_id=%d", message, attempt.id)
    if sla.alert:
        sla_store.insert_alert(conn, attempt.id, ALERT_KIND, message, now)
    record_sla_missed(conn, attempt.id, now)
    revoked = sla_store.cancel_unfinished_except(conn, attempt.id, root_id, now) if sla.fail else []
    fail = TaskSpec(SLA_FAIL_TASK_NAME, operator="fail", command=message) if sla.fail else None
    specs = [spec for spec in (sla.tasks, fail) if spec is not None]
    if specs:
        _add_under_root(conn, graph, root_id, specs, now)
    return revoked


def _add_under_root(
    conn: Connection, graph: TaskGraph, root_id: int, specs: list[TaskSpec], now: datetime
) -> None:
    """Generate ``specs`` as children of the root task, free of its other children's
    order, and start them (the root waits for them before it ends)."""
    root = task_store.get_task(conn, root_id)
    if root.state is not TaskState.PLANNED:
        return  # the root is ending or waiting for a retry: nothing runs under it now
    placement = Placement(
        attempt_id=root.attempt_id,
        parent_id=root.id,
        parent_full_name=root.full_name,
        inherited_export=merge_params(root.inherited_export, root.config.get("export")) or None,
        generated=True,
        first_position=task_store.count_children(conn, root.id),
    )
    ids = materialize_children(conn, placement, specs, [], now)
    graph.promote(ids)
