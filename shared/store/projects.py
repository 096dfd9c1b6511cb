"""Projects, revisions, workflow definitions (configs shared by digest) and schedules."""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, select

from tickwork.shared.domain.workflow import WorkflowDefinition
from tickwork.shared.dsl.archive import ProjectArchive
from tickwork.shared.errors import Conflict, InvalidInput, NotFound, Problem
from tickwork.shared.store.dialects import dialect_of
from tickwork.shared.store.engine import read_only
from tickwork.shared.store.notifications import replace_rules
from tickwork.shared.store.schedules import (
    remove_schedules,
    remove_schedules_except,
    upsert_schedule,
)
from tickwork.shared.store.sql import insert_ignoring_conflict
from tickwork.shared.store.tables import (
    attempts,
    project_archives,
    projects,
    revisions,
    schedules,
    workflow_configs,
    workflow_definitions,
)
from tickwork.shared.store.triggers import replace_triggers


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


# -- pushed projects -------------------------------------------------------------------

PROJECT_NAME = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")
MAX_REVISION_NAME_CHARS = 255


@dataclass(frozen=True)
class PushResult:
    """What a push stored: the revision, and how the project's schedules changed.

    ``schedules_added`` counts new and re-enabled schedules, ``schedules_updated`` active
    schedules whose ``schedule:`` or time zone changed, ``schedules_removed`` active ones
    whose workflow is gone or no longer has a schedule.
    """

    project_id: int
    project_name: str
    revision_id: int
    revision_name: str
    archive_digest: str
    created: bool
    workflows: tuple[str, ...]
    schedules_added: tuple[str, ...] = ()
    schedules_updated: tuple[str, ...] = ()
    schedules_removed: tuple[str, ...] = ()


def check_project_name(name: str) -> None:
    """InvalidInput (field ``project``) unless ``name`` can name a pushed project."""
    if not PROJECT_NAME.fullmatch(name) or name in (".", ".."):
        raise InvalidInput(
            [
                Problem(
                    "project",
                    None,
                    f"{name!r} is not a project name: 1-128 letters, digits, '_', '.' or '-', "
                    "starting with a letter or digit",
                )
            ]
        )


def check_revision_name(name: str) -> None:
    """InvalidInput (field ``revision``) unless ``name`` is 1-255 printable characters."""
    if not 0 < len(name) <= MAX_REVISION_NAME_CHARS or not name.isprintable():
        raise InvalidInput(
            [
                Problem(
                    "revision",
                    None,
                    f"{name[:80]!r} is not a revision name: 1-{MAX_REVISION_NAME_CHARS} "
                    "printable characters",
                )
            ]
        )


def push_revision(
    conn: Connection,
    *,
    project_name: str,
    revision_name: str | None,
    archive: ProjectArchive,
    now: datetime,
    schedule_from: datetime | None = None,
) -> PushResult:
    """Store a validated archive as a new revision of a project and update its schedules.

    The project is created (or revived, if it was deleted) as needed and the archive is
    stored once by digest. Pushing revision ``R`` again with the same archive changes
    nothing (``created=False``); with another archive it raises Conflict. The revision
    name defaults to a UUID. Raises InvalidInput naming ``project`` or ``revision``.
    """
    check_project_name(project_name)
    name = revision_name if revision_name is not None else str(uuid.uuid4())
    check_revision_name(name)
    project_id = _ensure_pushed_project(conn, project_name, now)
    _store_archive(conn, archive, now)
    revision_id = insert_ignoring_conflict(
        conn,
        revisions,
        {
            "project_id": project_id,
            "name": name,
            "default_params": {},
            "created_at": now,
            "archive_digest": archive.digest,
        },
    )
    result = PushResult(
        project_id, project_name, 0, name, archive.digest, False, tuple(sorted(archive.workflows))
    )
    if revision_id is None:
        return _existing_revision(conn, result)
    before = _active_schedules(conn, project_id)
    for definition in archive.workflows.values():
        definition_id = ensure_workflow_definition(conn, revision_id, definition)
        upsert_schedule(
            conn,
            project_id=project_id,
            definition_id=definition_id,
            definition=definition,
            now=now,
            schedule_from=schedule_from,
        )
    remove_schedules_except(conn, project_id, list(archive.workflows), now)
    replace_rules(conn, project_id, archive.notification_rules, now)
    replace_triggers(conn, project_id, project_name, archive.workflows, now)
    after = _active_schedules(conn, project_id)
    return replace(
        result,
        revision_id=revision_id,
        created=True,
        schedules_added=tuple(sorted(after.keys() - before.keys())),
        schedules_updated=tuple(
            sorted(n for n in after.keys() & before.keys() if after[n] != before[n])
        ),
        schedules_removed=tuple(sorted(before.keys() - after.keys())),
    )


def _ensure_pushed_project(conn: Connection, name: str, now: datetime) -> int:
    """The id of project ``name``, created or revived; a pushed project has no source dir."""
    project_id = ensure_project(conn, name, now)
    conn.execute(
        projects.update()
        .where(projects.c.id == project_id)
        .where((projects.c.deleted_at.is_not(None)) | (projects.c.source_dir.is_not(None)))
        .values(deleted_at=None, source_dir=None)
    )
    return project_id


def _store_archive(conn: Connection, archive: ProjectArchive, now: datetime) -> None:
    """Store the archive's bytes under its digest unless they are already there."""
    conn.execute(
        dialect_of(conn)
        .insert_ignoring_conflicts(project_archives, index_elements=["digest"])
        .values(
            digest=archive.digest,
            content=archive.content,
            size_bytes=len(archive.content),
            created_at=now,
        )
    )


def _existing_revision(conn: Connection, result: PushResult) -> PushResult:
    """The result of pushing a revision name that exists: nothing to do, or a Conflict."""
    query = select(revisions.c.id, revisions.c.archive_digest).where(
        revisions.c.project_id == result.project_id, revisions.c.name == result.revision_name
    )
    existing = conn.execute(query).one()
    if existing.archive_digest != result.archive_digest:
        raise Conflict(
            f"revision {result.revision_name!r} of project {result.project_name!r} already "
            "holds another archive; push under a new revision name"
        )
    return replace(result, revision_id=int(existing.id))


def _active_schedules(conn: Connection, project_id: int) -> dict[str, tuple[Any, str]]:
    """The active schedules of a project: workflow name -> (spec, time zone)."""
    query = select(schedules.c.workflow_name, schedules.c.spec, schedules.c.timezone).where(
        schedules.c.project_id == project_id, schedules.c.disabled_at.is_(None)
    )
    return {row.workflow_name: (row.spec, row.timezone) for row in conn.execute(query)}


def project_id_named(conn: Connection, name: str) -> int | None:
    """The id of the live (not deleted) project ``name``; None when there is none."""
    query = select(projects.c.id).where(projects.c.name == name, projects.c.deleted_at.is_(None))
    found = conn.execute(query).scalar_one_or_none()
    return None if found is None else int(found)


def delete_project(conn: Connection, name: str, now: datetime) -> None:
    """Soft-delete a project: its schedules are removed, its sessions and revisions kept.

    Raises NotFound if there is no such project (or it is already deleted).
    """
    query = select(projects.c.id).where(projects.c.name == name, projects.c.deleted_at.is_(None))
    project_id = conn.execute(query).scalar_one_or_none()
    if project_id is None:
        raise NotFound(f"project {name!r} does not exist")
    conn.execute(projects.update().where(projects.c.id == project_id).values(deleted_at=now))
    names = select(schedules.c.workflow_name).where(schedules.c.project_id == project_id)
    remove_schedules(conn, int(project_id), list(conn.execute(names).scalars()), now)


def get_project_archive(conn: Connection, digest: str) -> bytes:
    """The bytes of the archive stored under ``digest``; NotFound if there is none."""
    query = select(project_archives.c.content).where(project_archives.c.digest == digest)
    content = conn.execute(query).scalar_one_or_none()
    if content is None:
        raise NotFound(f"project archive {digest} does not exist")
    return bytes(content)


def archive_digest_of_attempt(conn: Connection, attempt_id: int) -> str | None:
    """The digest of the archive an attempt's revision was pushed with; None for a
    revision that has none (a workflow run from a local directory)."""
    query = (
        select(revisions.c.archive_digest)
        .select_from(
            attempts.join(
                workflow_definitions,
                attempts.c.workflow_definition_id == workflow_definitions.c.id,
            ).join(revisions, workflow_definitions.c.revision_id == revisions.c.id)
        )
        .where(attempts.c.id == attempt_id)
    )
    digest = conn.execute(query).scalar_one_or_none()
    return None if digest is None else str(digest)


def archive_reader(engine: Engine) -> Callable[[str], bytes | None]:
    """A function reading an archive's bytes from the store by digest (None if absent),
    each call on its own short read-only connection: what an in-process runner or the
    executor's publisher fetches archives with."""

    def read(digest: str) -> bytes | None:
        with read_only(engine) as conn:
            try:
                return get_project_archive(conn, digest)
            except NotFound:
                return None

    return read
