"""How a database or Redis URL may be printed (its password masked), and libpq's
multi-host form of a PostgreSQL URL read as SQLAlchemy reads it.

SQLAlchemy is imported only when a URL is printed, so a service that needs no store (an
agent) may print its Redis URL without loading it."""

from __future__ import annotations

from urllib.parse import parse_qsl, quote, urlencode

from tickwork.shared.redis_url import DIRECT_SCHEMES, SENTINEL_SCHEMES, printable_redis_url


def printable_url(url: str) -> str:
    """A database or Redis URL as it may be printed: its password, if any, masked."""
    if url.partition("://")[0].lower() in (*DIRECT_SCHEMES, *SENTINEL_SCHEMES):
        return printable_redis_url(url)
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(multi_host_url(url)).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):  # not a URL SQLAlchemy can parse: say nothing of it
        return "<unparsable URL>"


def multi_host_url(url: str) -> str:
    """A PostgreSQL URL with several hosts in libpq's form
    (``postgresql://USER@HOST1:PORT1,HOST2:PORT2/DB?target_session_attrs=read-write``)
    rewritten as SQLAlchemy reads one (``postgresql://USER@/DB?host=HOST1,HOST2&port=
    PORT1,PORT2&...``); any other URL as it is. libpq then tries the hosts in order and
    keeps the first that ``target_session_attrs`` accepts."""
    scheme, sep, rest = url.partition("://")
    if not sep or not scheme.lower().startswith("postgres"):
        return url
    netloc, _, tail = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    if "," not in hosts:
        return url
    names, ports = [], []
    for entry in hosts.split(","):
        host, colon, port = entry.rpartition(":") if entry.count(":") == 1 else (entry, "", "")
        names.append(host if colon else entry)
        ports.append(port)
    path, _, query = tail.partition("?")
    pairs = [
        (k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k not in ("host", "port")
    ]
    pairs.insert(0, ("host", ",".join(names)))
    if any(ports):
        pairs.insert(1, ("port", ",".join(p or "5432" for p in ports)))
    encoded = urlencode(pairs, quote_via=quote, safe=",/")
    return f"{scheme}://{userinfo}{at}/{path}?{encoded}"
