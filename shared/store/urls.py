"""How a database or Redis URL may be printed: its password masked.

SQLAlchemy is imported only when a URL is printed, so a service that needs no store (an
agent) may print its Redis URL without loading it."""

from __future__ import annotations

from tickwork.shared.redis_url import DIRECT_SCHEMES, SENTINEL_SCHEMES, printable_redis_url


def printable_url(url: str) -> str:
    """A database or Redis URL as it may be printed: its password, if any, masked."""
    if url.partition("://")[0].lower() in (*DIRECT_SCHEMES, *SENTINEL_SCHEMES):
        return printable_redis_url(url)
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):  # not a URL SQLAlchemy can parse: say nothing of it
        return "<unparsable URL>"
