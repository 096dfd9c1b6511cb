"""Project secrets in the store: set, list names, delete, and read ciphertexts for a task.

Values arrive here already encrypted (see :mod:`tickwork.shared.secrets`); nothing in this module
decrypts them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, select

from tickwork.shared.errors import NotFound
from tickwork.shared.secrets import check_secret_name
from tickwork.shared.store.projects import check_project_name, ensure_project
from tickwork.shared.store.tables import projects, secrets


@dataclass(frozen=True)
class SecretInfo:
    """A secret as it may be shown: its name and when it was last set, never its value."""

    name: str
    created_at: datetime
    updated_at: datetime


def _project_id(conn: Connection, project: str) -> int:
    query = select(projects.c.id).where(projects.c.name == project, projects.c.deleted_at.is_(None))
    found = conn.execute(query).scalar_one_or_none()
    if found is None:
        raise NotFound(f"project {project!r} does not exist")
    return int(found)


def set_secret(
    conn: Connection,
    project: str,
    name: str,
    value_encrypted: str,
    now: datetime,
    *,
    create_project: bool = False,
) -> bool:
    """Store the secret ``name`` of ``project`` (replacing its value); True if it is new.

    NotFound if the project does not exist, unless ``create_project`` (a local project that
    has not run yet gets its secrets first)."""
    check_secret_name(name)
    if create_project:
        check_project_name(project)
        project_id = ensure_project(conn, project, now)
    else:
        project_id = _project_id(conn, project)
    where = (secrets.c.project_id == project_id) & (secrets.c.name == name)
    # Lock the row (Postgres) so two concurrent sets cannot both insert.
    existing = conn.execute(select(secrets.c.id).where(where).with_for_update()).scalar()
    if existing is not None:
        values = {"value_encrypted": value_encrypted, "updated_at": now}
        conn.execute(secrets.update().where(secrets.c.id == existing).values(**values))
        return False
    conn.execute(
        secrets.insert().values(
            project_id=project_id,
            name=name,
            value_encrypted=value_encrypted,
            created_at=now,
            updated_at=now,
        )
    )
    return True


def list_secrets(conn: Connection, project: str) -> list[SecretInfo]:
    """The secrets of ``project`` by name, without values; NotFound if there is no project."""
    project_id = _project_id(conn, project)
    query = (
        select(secrets.c.name, secrets.c.created_at, secrets.c.updated_at)
        .where(secrets.c.project_id == project_id)
        .order_by(secrets.c.name)
    )
    return [
        SecretInfo(name=row.name, created_at=row.created_at, updated_at=row.updated_at)
        for row in conn.execute(query)
    ]


def delete_secret(conn: Connection, project: str, name: str) -> None:
    """Delete the secret ``name`` of ``project``; NotFound if there is no such secret."""
    check_secret_name(name)
    project_id = _project_id(conn, project)
    where = (secrets.c.project_id == project_id) & (secrets.c.name == name)
    if conn.execute(secrets.delete().where(where)).rowcount == 0:
        raise NotFound(f"project {project!r} has no secret {name!r}")


def read_encrypted_secrets(conn: Connection, project_id: int) -> dict[str, str]:
    """Every secret of a project by name, as ciphertext (what a task message carries)."""
    query = select(secrets.c.name, secrets.c.value_encrypted).where(
        secrets.c.project_id == project_id
    )
    return {row.name: row.value_encrypted for row in conn.execute(query)}
