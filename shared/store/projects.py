"""Projects, revisions, workflow definitions (configs shared by digest) and schedules."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, select

from shared.domain.workflow import WorkflowDefinition
from shared.store.sql import insert_ignoring_conflict
from shared.store.tables import (
    projects,
    revisions,
    workflow_configs,
    workflow_definitions,
)


def ensure_project(
    conn: Connection, name: str, now: datetime, *, source_dir: str | None = None
) -> int:
    """The id of project ``name``, creating it (from ``source_dir``) if it does not exist."""
    insert_ignoring_conflict(
        conn, projects, {"name": name, "source_dir": source_dir, "created_at": now}
    )
    return int(conn.execute(select(projects.c.id).where(projects.c.name == name)).scalar_one())


def ensure_local_project(conn: Connection, directory: Path, now: datetime) -> int:
    """The project of a directory run locally, named after it.

    Two directories with the same name (``a/etl`` and ``b/etl``) sharing one store are two
    projects: the second is named ``etl-<hash of its path>``.
    """
    source = str(directory.resolve())
    name = directory.name or "default"
    query = select(projects.c.source_dir).where(projects.c.name == name)
    found = conn.execute(query).one_or_none()
    if found is not None and found.source_dir not in (None, source):
        name = f"{name}-{hashlib.sha256(source.encode()).hexdigest()[:8]}"
    return ensure_project(conn, name, now, source_dir=source)


def ensure_revision(
    conn: Connection, project_id: int, name: str, default_params: dict[str, Any], now: datetime
) -> int:
    """The id of revision ``name`` of a project, creating it if it does not exist."""
    insert_ignoring_conflict(
        conn,
        revisions,
        {
            "project_id": project_id,
            "name": name,
            "default_params": default_params,
            "created_at": now,
        },
    )
    query = select(revisions.c.id).where(
        revisions.c.project_id == project_id, revisions.c.name == name
    )
    return int(conn.execute(query).scalar_one())


def config_digest(config: dict[str, Any]) -> str:
    """SHA-256 of a config's canonical JSON: identical workflows share one stored config."""
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def ensure_workflow_definition(
    conn: Connection, revision_id: int, definition: WorkflowDefinition
) -> int:
    """The id of the definition of ``definition.name`` in a revision, storing its config once."""
    config = definition.to_config()
    digest = config_digest(config)
    insert_ignoring_conflict(conn, workflow_configs, {"digest": digest, "config": config})
    config_id = conn.execute(
        select(workflow_configs.c.id).where(workflow_configs.c.digest == digest)
    ).scalar_one()
    insert_ignoring_conflict(
        conn,
        workflow_definitions,
        {"revision_id": revision_id, "name": definition.name, "config_id": config_id},
    )
    query = select(workflow_definitions.c.id).where(
        workflow_definitions.c.revision_id == revision_id,
        workflow_definitions.c.name == definition.name,
    )
    return int(conn.execute(query).scalar_one())


def load_workflow_definition(conn: Connection, definition_id: int) -> WorkflowDefinition:
    """The parsed workflow stored under a definition id."""
    query = (
        select(workflow_configs.c.config)
        .select_from(workflow_definitions.join(workflow_configs))
        .where(workflow_definitions.c.id == definition_id)
    )
    return WorkflowDefinition.from_config(conn.execute(query).scalar_one())
