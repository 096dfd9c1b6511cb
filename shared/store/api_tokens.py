"""Named bearer tokens kept in the store: created with a role and an optional expiry, shown
once, listed with when each was last used, and revoked at once on every API replica.

The row keeps the SHA-256 of the secret, never the secret. A fast hash is right here, and
a slow one (bcrypt, scrypt) would only cost time: the secret is 32 random bytes, so nobody
can guess it from its digest however fast the hash is, whereas a slow hash protects a
password a person chose, which is guessable. Each request looks its token up by that
digest through a unique index; a revoked or expired token's row no longer matches.
``last_used_at`` is written at most once a minute per token, not at every request.

A token may be limited to projects by shell-style globs (``projects``; :func:`covers`):
``data-*`` covers ``data-daily`` and ``data-hourly``. A token without globs covers every
project, those pushed later included.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from fnmatch import fnmatchcase
from typing import Any

from sqlalchemy import Connection, insert, select, update
from sqlalchemy.exc import IntegrityError

from tickwork.shared.errors import Conflict, InvalidInput, NotFound, Problem
from tickwork.shared.store.tables import api_tokens

SECRET_PREFIX = "tw_"
"""Every secret starts so, which lets secret scanners (and people) recognise one."""
SECRET_BYTES = 32
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
LAST_USED_INTERVAL = timedelta(minutes=1)
PROJECT_GLOB = re.compile(r"[A-Za-z0-9_.*?\[\]!-]{1,128}")
"""A project glob: what a project name may hold (letters, digits, '_', '.', '-') and the
glob's ``*``, ``?`` and ``[...]``."""
MAX_PROJECT_GLOBS = 32


@dataclass(frozen=True)
class StoredToken:
    """One token of the store, as listed (never its secret)."""

    name: str
    role: str
    created_by: str
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    revoked_at: datetime | None
    projects: tuple[str, ...] = ()
    """The globs of the projects it covers; empty: every project."""

    def is_live(self, now: datetime) -> bool:
        """Whether the token opens the API at ``now``: not revoked, not expired."""
        return self.revoked_at is None and (self.expires_at is None or now < self.expires_at)


def covers(globs: tuple[str, ...], project: str) -> bool:
    """Whether a token limited to ``globs`` (empty: every project) covers ``project``."""
    return not globs or any(fnmatchcase(project, glob) for glob in globs)


def check_project_globs(globs: Iterable[str]) -> tuple[str, ...]:
    """``globs`` in order, once each, if each may limit a token; InvalidInput naming the
    first that may not."""
    found: list[str] = []
    for index, glob in enumerate(globs):
        if not PROJECT_GLOB.fullmatch(glob):
            message = (
                f"project glob {glob!r} must be 1-128 letters, digits, '_', '.', '-' and "
                "the glob characters '*', '?', '[', ']' and '!'"
            )
            raise InvalidInput([Problem(f"/projects/{index}", None, message)])
        if glob not in found:
            found.append(glob)
    if len(found) > MAX_PROJECT_GLOBS:
        message = f"at most {MAX_PROJECT_GLOBS} project globs"
        raise InvalidInput([Problem("/projects", None, message)])
    return tuple(found)


def secret_digest(secret: str) -> str:
    """What the store keeps of a secret: its SHA-256, in hex."""
    return hashlib.sha256(secret.encode("utf-8", "surrogateescape")).hexdigest()


def check_token_name(name: str) -> str:
    """``name`` if it may name a token of the store; InvalidInput saying why not."""
    if not NAME_PATTERN.fullmatch(name):  # (which also refuses the environment's "env:")
        message = (
            f"token name {name!r} must be 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
        raise InvalidInput([Problem("name", None, message)])
    return name


def create_token(
    conn: Connection,
    name: str,
    role: str,
    created_by: str,
    now: datetime,
    expires_at: datetime | None,
    projects: Iterable[str] = (),
) -> tuple[StoredToken, str]:
    """Store a new token ``name``, limited to the project globs ``projects`` (none: every
    project); it and its secret (the only time that is seen). Conflict when a token of
    that name exists, revoked or not (names are never reused, so an old name in the logs
    means one token)."""
    check_token_name(name)
    globs = check_project_globs(projects)
    if expires_at is not None and expires_at <= now:
        raise InvalidInput([Problem("expires_at", None, "the expiry must be in the future")])
    secret = SECRET_PREFIX + secrets.token_urlsafe(SECRET_BYTES)
    try:
        with conn.begin_nested():
            conn.execute(
                insert(api_tokens).values(
                    name=name,
                    digest=secret_digest(secret),
                    role=role,
                    created_by=created_by,
                    created_at=now,
                    expires_at=expires_at,
                    last_used_at=None,
                    revoked_at=None,
                    projects=list(globs) or None,
                )
            )
    except IntegrityError:
        raise Conflict(f"a token named {name!r} exists (names are not reused)") from None
    return StoredToken(name, role, created_by, now, expires_at, None, None, globs), secret


def list_tokens(conn: Connection) -> list[StoredToken]:
    """Every token of the store, revoked ones too, by name."""
    rows = conn.execute(select(*_COLUMNS).order_by(api_tokens.c.name)).all()
    return [_token(row) for row in rows]


def find_token_by_digest(conn: Connection, digest: str, now: datetime) -> StoredToken | None:
    """The live token whose secret's digest is ``digest`` (one read by its unique index);
    None when there is none, or it was revoked or has expired."""
    row = conn.execute(select(*_COLUMNS).where(api_tokens.c.digest == digest)).one_or_none()
    if row is None:
        return None
    token = _token(row)
    return token if token.is_live(now) else None


def note_token_used(conn: Connection, token: StoredToken, now: datetime) -> None:
    """Record that ``token`` was used at ``now`` (callers do so at most every
    :data:`LAST_USED_INTERVAL`)."""
    conn.execute(update(api_tokens).where(api_tokens.c.name == token.name).values(last_used_at=now))


def revoke_token(conn: Connection, name: str, now: datetime) -> tuple[StoredToken, str]:
    """Revoke the token ``name`` at ``now``; it, revoked, and its digest (to end its UI
    sessions by). NotFound when the store has no such token; revoking a revoked token
    changes nothing."""
    row = conn.execute(
        select(*_COLUMNS, api_tokens.c.digest).where(api_tokens.c.name == name)
    ).one_or_none()
    if row is None:
        raise NotFound(f"no token named {name!r}")
    token = _token(row)
    if token.revoked_at is None:
        conn.execute(update(api_tokens).where(api_tokens.c.name == name).values(revoked_at=now))
        token = replace(token, revoked_at=now)
    return token, str(row.digest)


_COLUMNS = (
    api_tokens.c.name,
    api_tokens.c.role,
    api_tokens.c.created_by,
    api_tokens.c.created_at,
    api_tokens.c.expires_at,
    api_tokens.c.last_used_at,
    api_tokens.c.revoked_at,
    api_tokens.c.projects,
)


def _token(row: Any) -> StoredToken:
    """The token of a row of :data:`_COLUMNS` (any columns after them are left out)."""
    name, role, created_by, created_at, expires_at, last_used_at, revoked_at, projects = tuple(row)[
        : len(_COLUMNS)
    ]
    globs = tuple(str(glob) for glob in projects) if isinstance(projects, list) else ()
    return StoredToken(
        name, role, created_by, created_at, expires_at, last_used_at, revoked_at, globs
    )
