"""Retention's batches: each removes a bounded slice of old history in the caller's
transaction, children before parents, and counts what it removed per table.

A session goes only when every attempt of it has ended before the cutoff, it is not the
newest session of its schedule nor the newest that ran of its workflow (what
``last_executed_session_time`` reads), and no attempt of another session resumes one of
its attempts. Live work (waiting, created, running, canceling attempts) is never read
for deletion. A revision goes only when it is not among its project's newest ones and no
attempt or schedule uses one of its definitions; configs and archives go with the last
revision that named them. ``project_params`` are never touched: they have their own expiry.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Select,
    Subquery,
    and_,
    delete,
    exists,
    func,
    or_,
    select,
    tuple_,
    update,
)

from tickwork.shared.domain.states import DONE_ATTEMPT_STATES, AttemptState
from tickwork.shared.store.dialects import dialect_of
from tickwork.shared.store.tables import (
    alerts,
    attempts,
    project_archives,
    revisions,
    schedules,
    sessions,
    task_dependencies,
    task_log_chunks,
    task_logs,
    tasks,
    workflow_configs,
    workflow_definitions,
)

DONE = sorted(state.value for state in DONE_ATTEMPT_STATES)


@dataclass(frozen=True)
class BatchLimits:
    """How much one transaction removes at most, and the pause between two of them."""

    sessions: int = 200
    """Sessions per batch (fewer when their tasks pass :attr:`tasks`)."""
    tasks: int = 5_000
    """Tasks per batch, summed over its sessions' attempts (a session with more than
    this goes alone)."""
    logs: int = 2_000
    """Logs whose text goes per batch (log retention)."""
    revisions: int = 100
    """Revisions per batch."""
    audit: int = 2_000
    """Audit events per batch."""
    pause_seconds: float = 0.2
    """The least sleep between two batches, so that live work gets the database in
    between; 0: no sleep at all (a prune at full speed)."""
    load_share: float = 0.25
    """The most of the time a prune spends in its batches: after a batch that took t
    seconds it sleeps t * (1 / load_share - 1), if that is longer than the least pause.
    On two cores a prune at full speed made a running fan-out's hop p99 twice as long."""

    def pause_after(self, batch_seconds: float) -> float:
        """How long to sleep after a batch that took ``batch_seconds``."""
        if self.pause_seconds <= 0:
            return 0.0
        return max(self.pause_seconds, batch_seconds * (1 / self.load_share - 1))


def prune_session_batch(
    conn: Connection, cutoff: datetime, project_id: int | None, limits: BatchLimits
) -> tuple[Counter[str], bool]:
    """Remove up to a batch of finished sessions older than ``cutoff`` with everything
    of theirs; the rows removed per table, and whether more may be left."""
    found = list(conn.execute(_prunable_sessions(cutoff, project_id, limits.sessions)).scalars())
    if not found:
        return Counter(), False
    session_ids = _within_task_bound(conn, [int(i) for i in found], limits.tasks)
    attempt_ids = [
        int(i)
        for i in conn.execute(
            select(attempts.c.id).where(dialect_of(conn).in_ids(attempts.c.session_id, session_ids))
        ).scalars()
    ]
    removed = delete_attempt_rows(conn, attempt_ids)
    in_sessions = dialect_of(conn).in_ids(sessions.c.id, session_ids)
    removed["sessions"] = conn.execute(delete(sessions).where(in_sessions)).rowcount
    return removed, len(found) == limits.sessions or len(session_ids) < len(found)


def _prunable_sessions(cutoff: datetime, project_id: int | None, limit: int) -> Select[Any]:
    """Ids of the sessions retention may remove, oldest first."""
    latest_run = _latest_run_times()
    latest_of_schedule = _latest_schedule_times()
    query = (
        select(sessions.c.id)
        # Not the session ``last_executed_session_time`` reads for the workflow's next
        # sessions: a later one of the same workflow started an attempt.
        .join(
            latest_run,
            and_(
                latest_run.c.project_id == sessions.c.project_id,
                latest_run.c.workflow_name == sessions.c.workflow_name,
                sessions.c.session_time < latest_run.c.newest,
            ),
        )
        .outerjoin(latest_of_schedule, latest_of_schedule.c.schedule_id == sessions.c.schedule_id)
        .where(
            sessions.c.created_at < cutoff,
            # Not the newest session of its schedule.
            or_(
                sessions.c.schedule_id.is_(None),
                sessions.c.session_time < latest_of_schedule.c.newest,
            ),
            ~_has_attempt_kept(cutoff),
            ~_resumed_elsewhere(),
        )
        .order_by(sessions.c.id)
        .limit(limit)
    )
    if project_id is not None:
        query = query.where(sessions.c.project_id == project_id)
    return query


def _has_attempt_kept(cutoff: datetime) -> ColumnElement[bool]:
    """The session has an attempt that has not ended, or ended at or after ``cutoff``."""
    kept = or_(
        attempts.c.state.not_in(DONE),
        attempts.c.finished_at.is_(None),
        attempts.c.finished_at >= cutoff,
    )
    return exists().where(attempts.c.session_id == sessions.c.id, kept)


def _latest_run_times() -> Subquery:
    """The latest session time of each workflow whose session started an attempt."""
    ran = sessions.alias("ran")
    return (
        select(ran.c.project_id, ran.c.workflow_name, func.max(ran.c.session_time).label("newest"))
        .join(attempts, attempts.c.session_id == ran.c.id)
        .where(attempts.c.state != AttemptState.WAITING.value)
        .group_by(ran.c.project_id, ran.c.workflow_name)
        .subquery("latest_run")
    )


def _latest_schedule_times() -> Subquery:
    """The latest session time of each schedule."""
    scheduled = sessions.alias("scheduled")
    return (
        select(scheduled.c.schedule_id, func.max(scheduled.c.session_time).label("newest"))
        .where(scheduled.c.schedule_id.is_not(None))
        .group_by(scheduled.c.schedule_id)
        .subquery("latest_of_schedule")
    )


def _resumed_elsewhere() -> ColumnElement[bool]:
    """An attempt of another session resumes one of this session's attempts."""
    own = attempts.alias("own_attempt")
    resuming = attempts.alias("resuming_attempt")
    return exists().where(
        own.c.session_id == sessions.c.id,
        resuming.c.resume_from_attempt_id == own.c.id,
        resuming.c.session_id != sessions.c.id,
    )


def _within_task_bound(conn: Connection, session_ids: list[int], max_tasks: int) -> list[int]:
    """The first of ``session_ids`` whose tasks add up to at most ``max_tasks`` (at least one)."""
    counted = conn.execute(
        select(attempts.c.session_id, func.count(tasks.c.id))
        .join(tasks, tasks.c.attempt_id == attempts.c.id)
        .where(dialect_of(conn).in_ids(attempts.c.session_id, session_ids))
        .group_by(attempts.c.session_id)
    )
    per_session = {int(session_id): int(count) for session_id, count in counted}
    kept: list[int] = []
    total = 0
    for session_id in session_ids:
        total += int(per_session.get(session_id, 0))
        if kept and total > max_tasks:
            break
        kept.append(session_id)
    return kept


def delete_attempt_rows(conn: Connection, attempt_ids: Sequence[int]) -> Counter[str]:
    """Delete attempts with their tasks, dependencies, logs and alerts, children first;
    the rows removed per table. Their sessions are the caller's."""
    removed: Counter[str] = Counter()
    if not attempt_ids:
        return removed
    dialect = dialect_of(conn)
    task_ids = select(tasks.c.id).where(dialect.in_ids(tasks.c.attempt_id, attempt_ids))
    downstream, upstream = task_dependencies.c.downstream_id, task_dependencies.c.upstream_id
    statements = (
        ("task_log_chunks", delete(task_log_chunks).where(task_log_chunks.c.task_id.in_(task_ids))),
        ("task_logs", delete(task_logs).where(dialect.in_ids(task_logs.c.attempt_id, attempt_ids))),
        # Both ends, each through its own index (an edge stays within one attempt, but a
        # row naming a deleted task must not survive whichever end it is).
        ("task_dependencies", delete(task_dependencies).where(downstream.in_(task_ids))),
        ("task_dependencies", delete(task_dependencies).where(upstream.in_(task_ids))),
        # One statement for every task of the attempts: parents and children together.
        ("tasks", delete(tasks).where(dialect.in_ids(tasks.c.attempt_id, attempt_ids))),
        ("alerts", delete(alerts).where(dialect.in_ids(alerts.c.attempt_id, attempt_ids))),
        ("attempts", delete(attempts).where(dialect.in_ids(attempts.c.id, attempt_ids))),
    )
    for table, statement in statements:
        removed[table] += conn.execute(statement).rowcount
    return removed


def prune_log_batch(
    conn: Connection, cutoff: datetime, project_id: int | None, now: datetime, limit: int
) -> tuple[Counter[str], bool]:
    """Remove the text of up to ``limit`` logs of attempts that ended before ``cutoff``
    and mark their rows pruned (the rows stay); counts per table, and whether more may
    be left."""
    query = (
        select(task_logs.c.id, task_logs.c.task_id, task_logs.c.lease_token)
        .join(attempts, attempts.c.id == task_logs.c.attempt_id)
        .where(
            task_logs.c.pruned_at.is_(None),
            attempts.c.state.in_(DONE),
            attempts.c.finished_at < cutoff,
        )
        .order_by(task_logs.c.id)
        .limit(limit)
    )
    if project_id is not None:
        query = query.join(sessions, sessions.c.id == attempts.c.session_id).where(
            sessions.c.project_id == project_id
        )
    rows = conn.execute(query).all()
    if not rows:
        return Counter(), False
    runs = [(int(row.task_id), int(row.lease_token)) for row in rows]
    chunks = delete(task_log_chunks).where(
        tuple_(task_log_chunks.c.task_id, task_log_chunks.c.lease_token).in_(runs)
    )
    removed: Counter[str] = Counter()
    removed["task_log_chunks"] = conn.execute(chunks).rowcount
    marked = update(task_logs).where(
        dialect_of(conn).in_ids(task_logs.c.id, [int(row.id) for row in rows])
    )
    removed[PRUNED_LOGS] = conn.execute(marked.values(pruned_at=now)).rowcount
    return removed, len(rows) == limit


PRUNED_LOGS = "task_logs.pruned_at"
"""The count of logs whose text went while their rows stayed (log retention)."""


def prune_revision_batch(
    conn: Connection, keep_newest: int, project_id: int | None, limit: int
) -> tuple[Counter[str], bool]:
    """Remove up to ``limit`` revisions that are not among their project's ``keep_newest``
    newest and that no attempt or schedule uses, with their definitions, and the configs
    and archives no revision names any more; counts per table, and whether more may be left."""
    candidates = [int(i) for i in conn.execute(_old_revisions(keep_newest, project_id)).scalars()]
    revision_ids = _unused_revisions(conn, candidates)[:limit]
    if not revision_ids:
        return Counter(), False
    dialect = dialect_of(conn)
    definitions = select(workflow_definitions.c.id, workflow_definitions.c.config_id).where(
        dialect.in_ids(workflow_definitions.c.revision_id, revision_ids)
    )
    config_ids = sorted({int(row.config_id) for row in conn.execute(definitions)})
    archived = select(revisions.c.archive_digest).where(
        dialect.in_ids(revisions.c.id, revision_ids)
    )
    digests = sorted({d for d in conn.execute(archived).scalars() if d is not None})
    removed: Counter[str] = Counter()
    removed["workflow_definitions"] = conn.execute(
        delete(workflow_definitions).where(
            dialect.in_ids(workflow_definitions.c.revision_id, revision_ids)
        )
    ).rowcount
    removed["revisions"] = conn.execute(
        delete(revisions).where(dialect.in_ids(revisions.c.id, revision_ids))
    ).rowcount
    removed.update(_delete_orphans(conn, config_ids, digests))
    return removed, len(revision_ids) == limit


def _old_revisions(keep_newest: int, project_id: int | None) -> Select[Any]:
    """Revisions that are not among their project's ``keep_newest`` newest."""
    rank = (
        func.row_number()
        .over(partition_by=revisions.c.project_id, order_by=revisions.c.id.desc())
        .label("rank")
    )
    ranked = select(revisions.c.id, rank)
    if project_id is not None:
        ranked = ranked.where(revisions.c.project_id == project_id)
    listed = ranked.subquery()
    return select(listed.c.id).where(listed.c.rank > keep_newest).order_by(listed.c.id)


def _unused_revisions(conn: Connection, revision_ids: list[int]) -> list[int]:
    """Those of ``revision_ids`` with no definition an attempt or a schedule uses."""
    if not revision_ids:
        return []
    definition = workflow_definitions.c.id
    used = or_(
        exists().where(attempts.c.workflow_definition_id == definition),
        exists().where(schedules.c.workflow_definition_id == definition),
    )
    query = select(workflow_definitions.c.revision_id).where(
        dialect_of(conn).in_ids(workflow_definitions.c.revision_id, revision_ids), used
    )
    kept = {int(i) for i in conn.execute(query).scalars()}
    return [i for i in revision_ids if i not in kept]


def _delete_orphans(conn: Connection, config_ids: list[int], digests: list[str]) -> Counter[str]:
    """Delete those of the configs and archives that no definition or revision names now."""
    removed: Counter[str] = Counter()
    if config_ids:
        named = exists().where(workflow_definitions.c.config_id == workflow_configs.c.id)
        configs = delete(workflow_configs).where(
            dialect_of(conn).in_ids(workflow_configs.c.id, config_ids), ~named
        )
        removed["workflow_configs"] = conn.execute(configs).rowcount
    if digests:
        held = exists().where(revisions.c.archive_digest == project_archives.c.digest)
        archives = delete(project_archives).where(
            and_(project_archives.c.digest.in_(digests), ~held)
        )
        removed["project_archives"] = conn.execute(archives).rowcount
    return removed


def oldest_session_created_at(conn: Connection) -> datetime | None:
    """When the oldest session kept was created; None when there is none."""
    found: datetime | None = conn.execute(select(func.min(sessions.c.created_at))).scalar()
    return found
