"""Named tokens of the store: create (the secret is answered once), list, revoke; and
``/api/whoami``, which any token may ask.

Every route of ``/api/tokens`` needs an admin token (services/api/auth.py
ADMIN_BLUEPRINTS) without project globs (services/api/scope.py). Revoking a token ends it
at once in the replica asked and within a second in the others (each trusts a token it
has read for that long), and ends its web UI sessions in the same transaction. The
environment's tokens (``env:...``) are listed by ``whoami`` only: they are changed where
they are configured.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal

from apiflask import APIBlueprint
from flask import g
from pydantic import BaseModel, Field

from tickwork.services.api.auth import Identity, forget_verified
from tickwork.services.api.database import read_connection, write_transaction
from tickwork.services.api.errors import ApiProblem
from tickwork.services.api.extensions import api_config
from tickwork.services.api.models import RequestBody
from tickwork.shared.clock import utc_now
from tickwork.shared.domain.durations import BadDuration, parse_duration
from tickwork.shared.errors import InvalidInput, Problem
from tickwork.shared.store import api_tokens as token_store
from tickwork.shared.store.ui_sessions import end_token_ui_sessions

blueprint = APIBlueprint("tokens", __name__, url_prefix="/api/tokens", tag="Tokens")
whoami_blueprint = APIBlueprint("whoami", __name__, tag="Tokens")

MAX_LIFETIME = timedelta(days=3650)


class TokenIn(RequestBody):
    """A token to create."""

    name: str = Field(max_length=64, description="1-64 letters, digits, '.', '_' or '-'.")
    role: Literal["read", "operate", "admin"]
    expires_in: str | None = Field(
        default=None,
        max_length=32,
        description="How long it lasts, such as 90d or 12h (at most 3650d); none: no expiry.",
    )
    projects: list[str] = Field(
        default_factory=list,
        max_length=32,
        description="Globs of the projects it is limited to, such as data-*; none: every project.",
    )


class TokenOut(BaseModel):
    """A token of the store, never its secret."""

    name: str
    role: str
    projects: list[str] = Field(description="The project globs it is limited to; []: all.")
    created_by: str
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    revoked_at: datetime | None
    live: bool


class TokenCreated(TokenOut):
    """A new token, with its secret: shown this once, kept nowhere."""

    secret: str


class TokenList(BaseModel):
    """The tokens of the store, revoked ones too, by name."""

    items: list[TokenOut]


class WhoAmI(BaseModel):
    """Who the request's token is."""

    name: str = Field(description="The token's name: env:... for the environment's.")
    role: str
    projects: list[str] = Field(description="The project globs it is limited to; []: all.")
    source: Literal["environment", "store", "none"] = Field(
        description="none: this server takes no tokens (a loopback standalone)."
    )
    expires_at: datetime | None


def _item(token: token_store.StoredToken) -> dict[str, Any]:
    return {
        "name": token.name,
        "role": token.role,
        "projects": list(token.projects),
        "created_by": token.created_by,
        "created_at": token.created_at,
        "expires_at": token.expires_at,
        "last_used_at": token.last_used_at,
        "revoked_at": token.revoked_at,
        "live": token.is_live(utc_now()),
    }


def _asker() -> str:
    identity: Identity | None = g.get("identity")
    return identity.name if identity is not None else "anonymous"


def _lifetime(raw: str | None) -> timedelta | None:
    if raw is None:
        return None
    try:
        seconds = parse_duration(raw, minimum=1, maximum=int(MAX_LIFETIME.total_seconds()))
    except BadDuration as exc:
        raise InvalidInput([Problem("/expires_in", None, str(exc))]) from None
    return timedelta(seconds=seconds)


@blueprint.get("")
@blueprint.output(TokenList)
def list_tokens() -> dict[str, Any]:
    """Every token of the store: name, role, who created it, when, its expiry and last use."""
    with read_connection() as conn:
        return {"items": [_item(t) for t in token_store.list_tokens(conn)]}


@blueprint.post("")
@blueprint.input(TokenIn, arg_name="body")
@blueprint.output(TokenCreated, status_code=201)
@blueprint.doc(responses={409: "A token of that name exists (names are never reused)"})
def create_token(body: TokenIn) -> tuple[dict[str, Any], int]:
    """Create a token, limited to ``projects`` if given; its secret is in this answer and
    nowhere else."""
    if not api_config().auth_enabled:
        raise ApiProblem(
            409, "this server takes no tokens (sign-in is off): configure TICKWORK_API_TOKENS"
        )
    now = utc_now()
    lifetime = _lifetime(body.expires_in)
    expires_at = now + lifetime if lifetime is not None else None
    with write_transaction() as conn:
        created, secret = token_store.create_token(
            conn, body.name, body.role, _asker(), now, expires_at, body.projects
        )
    return {**_item(created), "secret": secret}, 201


@blueprint.delete("/<name>")
@blueprint.output(TokenOut)
@blueprint.doc(responses={404: "No token of that name in the store"})
def revoke_token(name: str) -> dict[str, Any]:
    """Revoke a token (refused within a second on every replica) and its web UI sessions."""
    now = utc_now()
    with write_transaction() as conn:
        revoked, digest = token_store.revoke_token(conn, name, now)
        end_token_ui_sessions(conn, digest, now)
    forget_verified()  # this process at once; the others within VERIFIED_SECONDS
    return _item(revoked)


@whoami_blueprint.get("/api/whoami")
@whoami_blueprint.output(WhoAmI)
def whoami() -> dict[str, Any]:
    """The name, role and project globs of the token the request came with."""
    identity: Identity | None = g.get("identity")
    if identity is None:
        return {
            "name": "anonymous",
            "role": "admin",
            "projects": [],
            "source": "none",
            "expires_at": None,
        }
    return {
        "name": identity.name,
        "role": identity.role,
        "projects": list(identity.projects),
        "source": "store" if identity.stored else "environment",
        "expires_at": identity.expires_at,
    }
