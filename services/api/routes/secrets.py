"""Project secrets: list names, set a value, delete; a value is never answered.

Every route needs an admin token (when tokens are configured), reads included: even the
names of secrets are not for other clients (services/api/auth.py ADMIN_BLUEPRINTS).
Values are encrypted with the API's ``TICKWORK_SECRET_KEY`` before they are stored.
"""

from __future__ import annotations

from typing import Any

from apiflask import APIBlueprint
from pydantic import BaseModel, Field

from tickwork.services.api.database import read_connection, write_transaction
from tickwork.services.api.errors import ApiProblem, InvalidParameter
from tickwork.services.api.models import RequestBody
from tickwork.services.api.times import format_time
from tickwork.shared.clock import utc_now
from tickwork.shared.errors import InvalidInput
from tickwork.shared.secrets import MAX_SECRET_BYTES, SecretBox, SecretKeyError, check_secret_name
from tickwork.shared.store import secrets as secret_store

blueprint = APIBlueprint("secrets", __name__, url_prefix="/api/projects", tag="Secrets")


class SecretIn(RequestBody):
    """A secret's new value."""

    value: str = Field(max_length=MAX_SECRET_BYTES, description="Stored encrypted; never shown.")
    create_project: bool = Field(
        default=False,
        description="Create the project, without revisions, if there is none (a local "
        "project that has not run yet gets its secrets first); else a missing one is a 404.",
    )


class SecretOut(BaseModel):
    """A secret, without its value."""

    name: str
    created_at: str
    updated_at: str


class SecretList(BaseModel):
    """The secrets of a project, by name."""

    items: list[SecretOut]


class SecretSet(BaseModel):
    """A secret that was set."""

    project: str
    name: str
    created: bool


def _checked_key(key: str) -> str:
    """``key`` if it is a secret name; 422 naming the path parameter otherwise."""
    try:
        check_secret_name(key)
    except InvalidInput as exc:
        raise InvalidParameter("key", exc.problems[0].message) from None
    return key


@blueprint.get("/<name>/secrets")
@blueprint.output(SecretList)
def list_secrets(name: str) -> dict[str, Any]:
    """The names of a project's secrets and when they were set; never their values."""
    with read_connection() as conn:
        found = secret_store.list_secrets(conn, name)
    return {
        "items": [
            {
                "name": s.name,
                "created_at": format_time(s.created_at),
                "updated_at": format_time(s.updated_at),
            }
            for s in found
        ]
    }


@blueprint.put("/<name>/secrets/<key>")
@blueprint.input(SecretIn, arg_name="body")
@blueprint.output(SecretSet)
def set_secret(name: str, key: str, body: SecretIn) -> dict[str, Any]:
    """Set (or replace) a secret of an existing project, or of a new one with
    ``create_project``."""
    _checked_key(key)
    try:
        encrypted = SecretBox.from_environment().encrypt(body.value)
    except SecretKeyError as exc:
        raise ApiProblem(503, f"this API cannot store secrets: {exc}") from None
    with write_transaction() as conn:
        created = secret_store.set_secret(
            conn, name, key, encrypted, utc_now(), create_project=body.create_project
        )
    return {"project": name, "name": key, "created": created}


@blueprint.delete("/<name>/secrets/<key>")
@blueprint.output({}, status_code=204)
@blueprint.doc(responses={404: "No such project or secret", 422: "Not a secret name"})
def delete_secret(name: str, key: str) -> tuple[str, int]:
    """Delete a secret of a project."""
    _checked_key(key)
    with write_transaction() as conn:
        secret_store.delete_secret(conn, name, key)
    return "", 204
