"""Retention: the prune that removes finished history older than the policy keeps
(shared/retention_policy.py, declared once for every service), batch by batch.

The scheduler applies the policy continuously (one replica at a time, under an advisory
lock on PostgreSQL); ``tickwork db prune`` applies it by hand. Each batch is its own short
transaction (see :class:`~tickwork.shared.store.retention_batches.BatchLimits`), with a pause
between two, so live work hardly notices; a dry run makes the same batches in one
transaction that it rolls back, and so reports exactly what a prune would remove.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, select

# The policy is re-exported: the prune's callers read it from here too.
from tickwork.shared.retention_policy import RetentionPolicy as RetentionPolicy
from tickwork.shared.retention_policy import parse_duration as parse_duration
from tickwork.shared.store.audit import SYSTEM_ACTOR, AuditEvent, prune_audit_batch, record
from tickwork.shared.store.dialects import dialect_of
from tickwork.shared.store.notifications import prune_delivery_batch
from tickwork.shared.store.retention_batches import (
    PRUNED_LOGS,
    BatchLimits,
    oldest_session_created_at,
    prune_log_batch,
    prune_revision_batch,
    prune_session_batch,
)
from tickwork.shared.store.tables import projects

RETENTION_KEY = "tickwork.retention"
"""Where a Flask application keeps the policy it describes (``app.extensions``)."""

RETENTION_LOCK_KEY = 0x7469636B707275  # "tickpru": one pruner at a time on PostgreSQL

TABLES = (
    "task_log_chunks",
    "task_logs",
    "task_dependencies",
    "tasks",
    "alerts",
    "attempts",
    "sessions",
    "workflow_definitions",
    "revisions",
    "workflow_configs",
    "project_archives",
    "audit_events",
    "notification_deliveries",
)
"""The tables a prune deletes from, in the order it reports them."""


@dataclass
class PruneResult:
    """What a prune removed (or, dry, would remove): rows per table, and logs whose text
    went while their rows stayed."""

    removed: Counter[str] = field(default_factory=Counter)
    batches: int = 0
    oldest_session_at: datetime | None = None

    @property
    def logs_pruned(self) -> int:
        """Logs whose text went (their rows stay, marked ``pruned_at``)."""
        return self.removed[PRUNED_LOGS]

    @property
    def total(self) -> int:
        """Rows deleted, over every table."""
        return sum(self.removed[table] for table in TABLES)

    def per_table(self) -> dict[str, int]:
        """Rows deleted per table, every table named (0 for none), in :data:`TABLES` order."""
        return {table: self.removed[table] for table in TABLES}


Step = Callable[[Connection], tuple[Counter[str], bool]]


def plan_steps(
    policy: RetentionPolicy,
    now: datetime,
    *,
    project_id: int | None = None,
    limits: BatchLimits | None = None,
) -> list[tuple[str, Step]]:
    """The batches a prune runs, by kind: sessions, then logs, then revisions (a
    revision is freed once the sessions that used it are gone), then notification
    deliveries that were settled (as old as the sessions), then audit events (kept
    longer, by their own setting; a prune of one project keeps them all)."""
    limits = limits or BatchLimits()
    steps: list[tuple[str, Step]] = []
    if policy.history is not None:
        cutoff = now - policy.history
        steps.append(("sessions", lambda c: prune_session_batch(c, cutoff, project_id, limits)))
    if policy.logs is not None:
        log_cutoff = now - policy.logs
        steps.append(
            ("logs", lambda c: prune_log_batch(c, log_cutoff, project_id, now, limits.logs))
        )
    if policy.keep_revisions is not None:
        keep = policy.keep_revisions
        steps.append(
            ("revisions", lambda c: prune_revision_batch(c, keep, project_id, limits.revisions))
        )
    if policy.history is not None:
        steps.append(
            (
                "notifications",
                lambda c: prune_delivery_batch(c, cutoff, project_id, limits.audit),
            )
        )
    if policy.audit is not None and project_id is None:
        audit_cutoff = now - policy.audit
        steps.append(("audit", lambda c: prune_audit_batch(c, audit_cutoff, limits.audit)))
    return steps


def prune_history(
    engine: Engine,
    policy: RetentionPolicy,
    now: datetime,
    *,
    project_id: int | None = None,
    dry_run: bool = False,
    limits: BatchLimits | None = None,
    on_batch: Callable[[str, PruneResult], None] | None = None,
    stop: Callable[[], bool] = lambda: False,
) -> PruneResult:
    """Remove what ``policy`` says is old at ``now`` (of one project, if given), batch by
    batch; with ``dry_run`` change nothing and say what would go. ``on_batch(kind,
    result)`` follows each batch; ``stop()`` true ends the prune between two batches."""
    limits = limits or BatchLimits()
    result = PruneResult()
    steps = plan_steps(policy, now, project_id=project_id, limits=limits)
    with _batches(engine, dry_run) as batch:
        for kind, step in steps:
            more = True
            while more and not stop():
                began = time.monotonic()
                with batch() as conn:
                    removed, more = step(conn)
                result.removed.update(removed)
                result.batches += 1
                if on_batch is not None:
                    on_batch(kind, result)
                if more and not dry_run:
                    time.sleep(limits.pause_after(time.monotonic() - began))
    if (result.total or result.logs_pruned) and not dry_run:
        with engine.begin() as conn:
            record(conn, _prune_event(result, now, project_id))
        with engine.begin() as conn:
            dialect_of(conn).reclaim_space(conn)
    return result


def _prune_event(result: PruneResult, now: datetime, project_id: int | None) -> AuditEvent:
    """The audit log's row of a prune that removed something (its actor: system)."""
    removed = {table: count for table, count in result.per_table().items() if count}
    if result.logs_pruned:
        removed[PRUNED_LOGS] = result.logs_pruned
    target = "history" if project_id is None else f"history of project id {project_id}"
    return AuditEvent(
        at=now, actor=SYSTEM_ACTOR, action="retention.prune", target=target, params=removed
    )


@contextmanager
def _batches(engine: Engine, dry_run: bool) -> Iterator[Callable[[], Any]]:
    """A factory of each batch's transaction: its own, committed, for a prune; one shared
    transaction rolled back at the end for a dry run."""
    if not dry_run:
        yield engine.begin
        return
    with engine.connect() as conn:
        transaction = conn.begin()

        @contextmanager
        def shared() -> Iterator[Connection]:
            yield conn

        try:
            yield shared
        finally:
            transaction.rollback()


@contextmanager
def pruning_lock(engine: Engine) -> Iterator[bool]:
    """Whether this process may prune now: on PostgreSQL, whether it took the advisory
    lock :data:`RETENTION_LOCK_KEY` (held on its own connection until the block ends; a
    replica that did not get it skips its pass); on SQLite, always."""
    dialect = dialect_of(engine)
    if not dialect.serves_many_processes:
        yield True  # one process uses the file
        return
    with engine.connect() as conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")
        held = dialect.try_advisory_lock(conn, RETENTION_LOCK_KEY)
        try:
            yield held
        finally:
            if held:
                dialect.advisory_unlock(conn, RETENTION_LOCK_KEY)


def find_project_id(conn: Connection, name: str) -> int | None:
    """The id of the project named ``name``, deleted or not; None when there is none."""
    found = conn.execute(select(projects.c.id).where(projects.c.name == name)).scalar()
    return None if found is None else int(found)


def oldest_session_age_seconds(engine: Engine, now: datetime) -> float:
    """How old the oldest session kept is, in seconds (0 with none)."""
    with dialect_of(engine).connect_for_reads(engine) as conn:
        oldest = oldest_session_created_at(conn)
    return max((now - oldest).total_seconds(), 0.0) if oldest is not None else 0.0
