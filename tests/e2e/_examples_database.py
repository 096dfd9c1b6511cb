"""The PostgreSQL database of the ``incremental_load.dig`` example: a throwaway database
on the test server, and the project secrets that point the example's ``pg>`` tasks at it
(they win over the example's own ``_export: pg``, as the example's comment says)."""

from __future__ import annotations

from sqlalchemy.engine import make_url

SECRET_KEY = "a passphrase for the examples"
"""The ``TICKWORK_SECRET_KEY`` the examples' secrets are encrypted with."""


def pg_secrets(database_url: str) -> dict[str, str]:
    """The secrets ``pg.host``, ``pg.port``, ``pg.user`` and ``pg.database`` of a database."""
    url = make_url(database_url)
    return {
        "pg.host": url.host or "127.0.0.1",
        "pg.port": str(url.port or 5432),
        "pg.user": url.username or "postgres",
        "pg.database": str(url.database),
    }
