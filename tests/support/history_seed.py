"""Putting old and live history straight into the store, for the retention specs: a
project with revisions, sessions with an attempt, a small task tree, logs and an alert."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import Connection, func, insert, select

from tickwork.shared.domain.states import AttemptState, TaskState
from tickwork.shared.store.tables import (
    alerts,
    attempts,
    project_archives,
    projects,
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

NOW = datetime(2026, 12, 1, tzinfo=UTC)
DAY = timedelta(days=1)
TABLES = (
    sessions,
    attempts,
    tasks,
    task_dependencies,
    task_logs,
    task_log_chunks,
    alerts,
    revisions,
    workflow_definitions,
    workflow_configs,
    project_archives,
)


@dataclass(frozen=True)
class Run:
    """One seeded session with its one attempt."""

    session_id: int
    attempt_id: int
    task_ids: tuple[int, ...]


def add_project(conn: Connection, name: str = "etl") -> int:
    """A project with no revision yet."""
    row = {"name": name, "created_at": NOW - 400 * DAY}
    return int(conn.execute(insert(projects).values(row).returning(projects.c.id)).scalar_one())


def add_revision(
    conn: Connection, project_id: int, name: str, workflow: str = "wf", *, archive: str = ""
) -> int:
    """A revision of one workflow (its own config), and its archive if ``archive`` names
    one; the workflow definition's id."""
    if archive:
        values = {"digest": archive, "content": b"x", "size_bytes": 1, "created_at": NOW}
        existing = select(project_archives.c.digest).where(project_archives.c.digest == archive)
        if conn.execute(existing).first() is None:
            conn.execute(insert(project_archives).values(values))
    revision = {
        "project_id": project_id,
        "name": name,
        "default_params": {},
        "created_at": NOW - 300 * DAY,
        "archive_digest": archive or None,
    }
    revision_id = conn.execute(insert(revisions).values(revision).returning(revisions.c.id))
    config = {"digest": uuid.uuid4().hex, "config": {"name": workflow, "revision": name}}
    config_id = conn.execute(
        insert(workflow_configs).values(config).returning(workflow_configs.c.id)
    )
    definition = {"revision_id": revision_id.scalar_one(), "name": workflow}
    definition["config_id"] = config_id.scalar_one()
    found = conn.execute(
        insert(workflow_definitions).values(definition).returning(workflow_definitions.c.id)
    )
    return int(found.scalar_one())


def add_schedule(
    conn: Connection, project_id: int, definition_id: int, workflow: str = "wf"
) -> int:
    """An active schedule of the workflow."""
    row = {
        "project_id": project_id,
        "workflow_name": workflow,
        "workflow_definition_id": definition_id,
        "spec": {"cron": "0 * * * *"},
        "timezone": "UTC",
        "created_at": NOW - 400 * DAY,
        "updated_at": NOW - 400 * DAY,
    }
    return int(conn.execute(insert(schedules).values(row).returning(schedules.c.id)).scalar_one())


def add_run(
    conn: Connection,
    project_id: int,
    definition_id: int,
    session_time: datetime,
    *,
    state: AttemptState = AttemptState.SUCCESS,
    workflow: str = "wf",
    schedule_id: int | None = None,
    finished_at: datetime | None = None,
    resume_from: int | None = None,
    session_id: int | None = None,
) -> Run:
    """A session at ``session_time`` (created then) with one attempt in ``state``, ended
    an hour later if done, a group with two tasks (one after the other), a log of each
    task with two chunks, and an alert; or one more attempt of ``session_id``."""
    if session_id is None:
        session = {
            "project_id": project_id,
            "workflow_name": workflow,
            "session_time": session_time,
            "session_uuid": str(uuid.uuid4()),
            "schedule_id": schedule_id,
            "created_at": session_time,
        }
        found = conn.execute(insert(sessions).values(session).returning(sessions.c.id))
        session_id = int(found.scalar_one())
    if finished_at is None and state.is_done:
        finished_at = session_time + timedelta(hours=1)
    attempt = {
        "session_id": session_id,
        "name": f"a{uuid.uuid4().hex[:8]}",
        "workflow_definition_id": definition_id,
        "state": state.value,
        "timezone": "UTC",
        "params": {},
        "created_at": session_time,
        "finished_at": finished_at,
        "resume_from_attempt_id": resume_from,
    }
    attempt_id = int(
        conn.execute(insert(attempts).values(attempt).returning(attempts.c.id)).scalar_one()
    )
    task_ids = _add_tasks(conn, attempt_id, session_time, state)
    alert = {"attempt_id": attempt_id, "kind": "sla", "message": "late", "created_at": session_time}
    conn.execute(insert(alerts).values(alert))
    return Run(session_id, attempt_id, task_ids)


def _add_tasks(
    conn: Connection, attempt_id: int, at: datetime, state: AttemptState
) -> tuple[int, ...]:
    task_state = TaskState.SUCCESS if state.is_done else TaskState.RUNNING
    common = {"attempt_id": attempt_id, "is_generated": False, "state": task_state.value}
    common |= {"config": {}, "created_at": at, "updated_at": at}
    root = {**common, "full_name": "+wf", "position": 0, "is_group": True, "parent_id": None}
    root_id = int(conn.execute(insert(tasks).values(root).returning(tasks.c.id)).scalar_one())
    children = []
    for position, name in enumerate(("+wf+a", "+wf+b")):
        child = {**common, "full_name": name, "position": position, "is_group": False}
        child["parent_id"] = root_id
        children.append(
            int(conn.execute(insert(tasks).values(child).returning(tasks.c.id)).scalar_one())
        )
    conn.execute(
        insert(task_dependencies).values(upstream_id=children[0], downstream_id=children[1])
    )
    for task_id in children:
        log = {"task_id": task_id, "attempt_id": attempt_id, "lease_token": 1, "path": "p"}
        conn.execute(insert(task_logs).values(**log, size_bytes=10, created_at=at))
        for offset in (0, 5):
            chunk = {"task_id": task_id, "lease_token": 1, "byte_offset": offset}
            conn.execute(
                insert(task_log_chunks).values(
                    **chunk, size_bytes=5, compressed=False, data=b"hello"
                )
            )
    return (root_id, *children)


def count_rows(conn: Connection) -> dict[str, int]:
    """Rows of every table retention touches, by table name."""
    return {
        table.name: int(conn.execute(select(func.count()).select_from(table)).scalar_one())
        for table in TABLES
    }
