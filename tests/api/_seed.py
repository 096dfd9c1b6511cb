"""Putting projects, sessions and attempts straight into the store for the API's tests."""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, select, update

from tests.support.history_seed import Run, add_run
from tickwork.shared.domain.states import AttemptState
from tickwork.shared.dsl.parser import parse_workflow_text
from tickwork.shared.store import projects as project_store
from tickwork.shared.store.logs import LogChunk, write_log_chunks
from tickwork.shared.store.sessions import ensure_session, insert_attempt
from tickwork.shared.store.tables import (
    attempts,
    projects,
    revisions,
    schedules,
    task_logs,
    tasks,
    workflow_definitions,
)

NOW = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)

THREE_STEPS = """
    timezone: UTC
    +first:
      echo>: first
    +second:
      echo>: second
    +third:
      echo>: third
"""


def add_project(
    conn: Connection,
    name: str,
    workflows: dict[str, str],
    *,
    revision: str = "r1",
    default_params: dict[str, Any] | None = None,
) -> int:
    """A project whose revision ``revision`` holds ``workflows`` (name -> .dig text)."""
    project_id = project_store.ensure_project(conn, name, NOW)
    revision_id = project_store.ensure_revision(
        conn, project_id, revision, default_params or {}, NOW
    )
    for workflow, text in workflows.items():
        definition = parse_workflow_text(textwrap.dedent(text), f"{workflow}.dig", Path("."))
        project_store.ensure_workflow_definition(conn, revision_id, definition)
    return project_id


def delete_project(conn: Connection, name: str) -> None:
    """Soft-delete a project, as DELETE /api/projects/{name} does."""
    conn.execute(update(projects).where(projects.c.name == name).values(deleted_at=NOW))


def add_sessions(
    engine: Engine,
    project_id: int,
    workflow: str,
    count: int,
    *,
    state: AttemptState = AttemptState.SUCCESS,
    first_time: datetime = NOW,
) -> list[int]:
    """``count`` sessions an hour apart, each with one attempt in ``state``; their ids."""
    ids = []
    with engine.begin() as conn:
        definition_id = definition_id_of(conn, project_id, workflow)
        for index in range(count):
            session_id = ensure_session(
                conn,
                project_id=project_id,
                workflow_name=workflow,
                session_time=first_time + timedelta(hours=index),
                now=NOW,
            )
            attempt_id = insert_attempt(
                conn,
                session_id=session_id,
                name="scheduled",
                workflow_definition_id=definition_id,
                timezone="UTC",
                params={},
                now=NOW,
            )
            set_state(conn, int(attempt_id or 0), state)
            ids.append(session_id)
    return ids


def definition_id_of(conn: Connection, project_id: int, workflow: str) -> int:
    """The id of ``workflow`` in the project's latest revision."""
    query = (
        select(workflow_definitions.c.id)
        .join(revisions, revisions.c.id == workflow_definitions.c.revision_id)
        .where(revisions.c.project_id == project_id, workflow_definitions.c.name == workflow)
        .order_by(workflow_definitions.c.id.desc())
        .limit(1)
    )
    return int(conn.execute(query).scalar_one())


def set_state(conn: Connection, attempt_id: int, state: AttemptState) -> None:
    """Force an attempt into ``state`` (finished_at set for a done one)."""
    finished = NOW if state.is_done else None
    conn.execute(
        update(attempts)
        .where(attempts.c.id == attempt_id)
        .values(state=state.value, finished_at=finished)
    )


def store_run_log(
    engine: Engine, attempt_id: int, full_name: str, content: bytes, chunk_bytes: int = 256 * 1024
) -> int:
    """A task of ``attempt_id`` whose one run (token 1) ended with ``content`` as its log,
    stored in chunks as the executor stores an agent's; the task's id."""
    with engine.begin() as conn:
        row = {
            "attempt_id": attempt_id,
            "parent_id": None,
            "full_name": full_name,
            "position": 0,
            "is_group": False,
            "is_generated": False,
            "state": "success",
            "config": {},
            "created_at": NOW,
            "updated_at": NOW,
        }
        task_id = int(conn.execute(tasks.insert().returning(tasks.c.id), row).scalar_one())
        log = {
            "task_id": task_id,
            "attempt_id": attempt_id,
            "lease_token": 1,
            "path": f"{attempt_id}/big.{task_id}.1.log",
            "size_bytes": len(content),
            "created_at": NOW,
            "ended_at": NOW,
        }
        conn.execute(task_logs.insert(), log)
    for start in range(0, len(content), 16 * chunk_bytes):
        chunks = [
            LogChunk(task_id, 1, offset, content[offset : offset + chunk_bytes])
            for offset in range(start, min(start + 16 * chunk_bytes, len(content)), chunk_bytes)
        ]
        with engine.begin() as conn:
            write_log_chunks(conn, chunks)
    return task_id


def add_pushed_run(
    engine: Engine,
    project: str,
    workflow: str,
    *,
    state: AttemptState = AttemptState.SUCCESS,
    at: datetime = NOW - timedelta(days=1),
) -> Run:
    """A run (session at ``at``, an attempt in ``state``, tasks, their logs) of
    ``workflow`` of the pushed project ``project``, in its schedule if it has one."""
    with engine.begin() as conn:
        project_id = int(
            conn.execute(select(projects.c.id).where(projects.c.name == project)).scalar_one()
        )
        definition_id = definition_id_of(conn, project_id, workflow)
        schedule_id = conn.execute(
            select(schedules.c.id).where(
                schedules.c.project_id == project_id, schedules.c.workflow_name == workflow
            )
        ).scalar_one_or_none()
        return add_run(
            conn,
            project_id,
            definition_id,
            at,
            state=state,
            workflow=workflow,
            schedule_id=schedule_id,
        )
