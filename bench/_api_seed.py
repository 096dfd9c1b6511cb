"""Seeding the API benchmark's database: one pushed project and many sessions, in bulk."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Engine, select, text

from tickwork.shared.dsl.archive import ProjectArchive, pack_project, read_project_archive
from tickwork.shared.store import projects as project_store
from tickwork.shared.store.tables import workflow_definitions

PROJECT = "bench"
WORKFLOW = "bench"
WORKFLOW_TEXT = "timezone: UTC\n+a:\n  echo>: hi\n"
# Seeded sessions are a minute apart from here; started ones are far after, a second apart.
FIRST_SEEDED_TIME = datetime(2025, 1, 1, tzinfo=UTC)
FIRST_STARTED_TIME = datetime(2035, 1, 1, tzinfo=UTC)

_INSERT_SESSIONS = text(
    "INSERT INTO sessions (project_id, workflow_name, session_time, session_uuid, created_at) "
    "SELECT :project_id, :workflow, :first + make_interval(mins => n), "
    "gen_random_uuid()::text, now() FROM generate_series(0, :count - 1) AS n"
)
_INSERT_ATTEMPTS = text(
    "INSERT INTO attempts (session_id, name, workflow_definition_id, state, timezone, params, "
    "created_at, finished_at) "
    "SELECT id, 'scheduled', :definition_id, 'success', 'UTC', CAST('{}' AS json), "
    "session_time, session_time + interval '1 second' FROM sessions WHERE project_id = :project_id"
)


@dataclass(frozen=True)
class Seeded:
    """What was stored: the project's and workflow definition's ids, and how many sessions."""

    project_id: int
    definition_id: int
    sessions: int


def project_archive() -> ProjectArchive:
    """The project as ``tickwork push`` uploads it (one ``bench.dig``), read back."""
    with tempfile.TemporaryDirectory(prefix="tickwork-bench-project-") as directory:
        (Path(directory) / f"{WORKFLOW}.dig").write_text(WORKFLOW_TEXT)
        return read_project_archive(pack_project(Path(directory)))


def seed(engine: Engine, session_count: int) -> Seeded:
    """Push the project through the store, then store ``session_count`` finished sessions
    with one attempt each, in two ``INSERT ... SELECT generate_series``; then ANALYZE."""
    now = datetime.now(UTC)
    with engine.begin() as conn:
        pushed = project_store.push_revision(
            conn, project_name=PROJECT, revision_name="r1", archive=project_archive(), now=now
        )
        definition_id = conn.execute(
            select(workflow_definitions.c.id).where(
                workflow_definitions.c.revision_id == pushed.revision_id,
                workflow_definitions.c.name == WORKFLOW,
            )
        ).scalar_one()
        values = {"project_id": pushed.project_id, "workflow": WORKFLOW, "count": session_count}
        conn.execute(_INSERT_SESSIONS, {**values, "first": FIRST_SEEDED_TIME})
        conn.execute(
            _INSERT_ATTEMPTS, {"project_id": pushed.project_id, "definition_id": definition_id}
        )
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("ANALYZE"))
    return Seeded(pushed.project_id, int(definition_id), session_count)
