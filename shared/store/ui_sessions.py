"""The web UI's signed-in sessions: one row per sign-in, so that ending it ends every copy
of its cookie on every API replica at once.

The cookie holds a random session id; the row holds only its SHA-256 (a copy of the
table lets nobody sign in), the digest of the token signed in with (its identity, so that
ending every session of one token is one UPDATE), the role, and when the session started,
was last seen and ended. A session is live while it has not ended and was seen within its
idle lifetime; :func:`remove_finished_ui_sessions` deletes the others.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection, delete, insert, or_, select, update

from tickwork.shared.store.tables import ui_sessions


@dataclass(frozen=True)
class UiSession:
    """One sign-in to the web UI, as the store keeps it."""

    token_digest: str
    role: str
    created_at: datetime
    last_seen_at: datetime
    ended_at: datetime | None

    def is_live(self, now: datetime, idle_lifetime: timedelta) -> bool:
        """Whether the session may still be used at ``now``: not ended, and seen within
        ``idle_lifetime``."""
        return self.ended_at is None and now - self.last_seen_at < idle_lifetime


def session_id_digest(session_id: str) -> str:
    """What the store keeps of a session id: its SHA-256, in hex."""
    return hashlib.sha256(session_id.encode("utf-8", "surrogateescape")).hexdigest()


def start_ui_session(
    conn: Connection, session_id: str, token_digest: str, role: str, now: datetime
) -> None:
    """Record a sign-in under ``session_id`` (random, from the caller) at ``now``."""
    conn.execute(
        insert(ui_sessions).values(
            id_digest=session_id_digest(session_id),
            token_digest=token_digest,
            role=role,
            created_at=now,
            last_seen_at=now,
            ended_at=None,
        )
    )


def find_ui_session(conn: Connection, session_id: str) -> UiSession | None:
    """The session of ``session_id``, live or not (a primary-key read); None when the
    store has none."""
    row = conn.execute(
        select(
            ui_sessions.c.token_digest,
            ui_sessions.c.role,
            ui_sessions.c.created_at,
            ui_sessions.c.last_seen_at,
            ui_sessions.c.ended_at,
        ).where(ui_sessions.c.id_digest == session_id_digest(session_id))
    ).one_or_none()
    if row is None:
        return None
    return UiSession(row.token_digest, row.role, row.created_at, row.last_seen_at, row.ended_at)


def touch_ui_session(conn: Connection, session_id: str, now: datetime) -> None:
    """Note that the session of ``session_id`` was used at ``now`` (if it has not ended)."""
    conn.execute(
        update(ui_sessions)
        .where(
            ui_sessions.c.id_digest == session_id_digest(session_id),
            ui_sessions.c.ended_at.is_(None),
        )
        .values(last_seen_at=now)
    )


def end_ui_session(conn: Connection, session_id: str, now: datetime) -> bool:
    """End the session of ``session_id`` at ``now`` (signing out); whether it was live."""
    result = conn.execute(
        update(ui_sessions)
        .where(
            ui_sessions.c.id_digest == session_id_digest(session_id),
            ui_sessions.c.ended_at.is_(None),
        )
        .values(ended_at=now)
    )
    return result.rowcount > 0


def end_token_ui_sessions(conn: Connection, token_digest: str, now: datetime) -> int:
    """End at ``now`` every live session signed in with the token of ``token_digest`` (a
    token removed or revoked); how many."""
    result = conn.execute(
        update(ui_sessions)
        .where(ui_sessions.c.token_digest == token_digest, ui_sessions.c.ended_at.is_(None))
        .values(ended_at=now)
    )
    return int(result.rowcount)


def remove_finished_ui_sessions(conn: Connection, now: datetime, idle_lifetime: timedelta) -> int:
    """Delete the sessions that have ended or were last seen ``idle_lifetime`` or more
    before ``now``; how many. Each sign-in calls it, so the table holds about the
    sessions of one idle lifetime."""
    result = conn.execute(
        delete(ui_sessions).where(
            or_(
                ui_sessions.c.ended_at.is_not(None),
                ui_sessions.c.last_seen_at <= now - idle_lifetime,
            )
        )
    )
    return int(result.rowcount)
