"""``TICKWORK_REDIS_URL``: one Redis server, or a Sentinel deployment, in one URL form that
every Redis client of tickwork reads (the Celery broker, leases, events, log streams,
wake-ups, the services' checks).

- ``redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]``, ``rediss://...`` (TLS) or
  ``unix://[[USER]:PASSWORD@]/PATH[?db=DB]``: one server (a managed service's single
  endpoint included), as redis-py and kombu read them.
- ``sentinel://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/MASTER[/DB][?OPTIONS]``:
  the sentinels (port 26379 unless given) that watch the primary named ``MASTER``. Clients
  ask them for the primary, and ask again when a connection to it fails: after a failover
  they find the promoted replica on their own. ``USER``/``PASSWORD`` authenticate to the
  data nodes. ``sentinels://`` speaks TLS to the sentinels and to the data nodes.

``OPTIONS`` (query parameters): ``sentinel_username`` and ``sentinel_password`` (the
sentinels' own credentials, when they require any); ``ssl_ca_certs``, ``ssl_certfile``,
``ssl_keyfile`` and ``ssl_cert_reqs`` (``required``, ``optional`` or ``none``) for TLS, as
``rediss://`` URLs take them.

This module reads and checks the URL only (it imports neither redis-py nor kombu, so that
settings are checked fast); :mod:`tickwork.shared.dispatch.celery_app` makes the clients.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

DIRECT_SCHEMES = ("redis", "rediss", "unix")
SENTINEL_SCHEMES = ("sentinel", "sentinels")
DEFAULT_SENTINEL_PORT = 26379
SENTINEL_OPTIONS = frozenset({"sentinel_username", "sentinel_password"})
TLS_OPTIONS = frozenset({"ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs"})
CERT_REQS = ("required", "optional", "none")
FORM = "sentinel://[:PASSWORD@]HOST:PORT[,HOST:PORT...]/MASTER[/DB]"


class BadRedisUrl(ValueError):
    """A Redis URL tickwork cannot use; the message says why, without the password."""


@dataclass(frozen=True)
class SentinelDeployment:
    """A primary named ``master`` and the sentinels that know where it is."""

    sentinels: tuple[tuple[str, int], ...]
    master: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_username: str | None = None
    sentinel_password: str | None = None
    tls: bool = False
    tls_options: Mapping[str, str] = field(default_factory=dict)

    def sentinel_kwargs(self, socket_timeout: float) -> dict[str, Any]:
        """What a connection to a sentinel needs (redis-py's and kombu's ``sentinel_kwargs``)."""
        kwargs: dict[str, Any] = {"socket_timeout": socket_timeout}
        if self.sentinel_username:
            kwargs["username"] = self.sentinel_username
        if self.sentinel_password:
            kwargs["password"] = self.sentinel_password
        if self.tls:
            kwargs.update(ssl=True, **self.tls_options)
        return kwargs

    def kombu_url(self) -> str:
        """kombu's form: one ``sentinel://`` URL per sentinel, joined by ``;``; the data
        nodes' credentials and the database on the first."""
        auth = ""
        if self.password is not None or self.username:
            user = quote(self.username or "", safe="")
            auth = f"{user}:{quote(self.password or '', safe='')}@"
        urls = [
            f"sentinel://{auth if i == 0 else ''}{host}:{port}/{self.db}"
            for i, (host, port) in enumerate(self.sentinels)
        ]
        return ";".join(urls)


def parse_redis_url(url: str) -> SentinelDeployment | None:
    """The Sentinel deployment ``url`` names, None for a one-server URL; BadRedisUrl when
    tickwork cannot use it."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme in DIRECT_SCHEMES:
        return None
    if scheme not in SENTINEL_SCHEMES:
        raise BadRedisUrl(
            "expected a redis://, rediss:// or unix:// URL, or sentinel:// (sentinels:// with "
            f"TLS) naming a Sentinel deployment as {FORM}"
        )
    if ";" in url:
        raise BadRedisUrl(
            f"name the sentinels in one URL, separated by commas: {FORM} "
            "(kombu's list of sentinel:// URLs joined by ';' has no place for the master's name)"
        )
    rest = url.split("://", 1)[1]
    netloc, _, tail = rest.partition("/")
    path, _, query = tail.partition("?")
    userinfo, _, hosts = netloc.rpartition("@")
    username, password = _credentials(userinfo) if "@" in netloc else (None, None)
    sentinels = tuple(_sentinel_address(part) for part in hosts.split(","))
    segments = [unquote(s) for s in path.split("/") if s] if path else []
    if not segments:
        raise BadRedisUrl(f"name the primary the sentinels watch after the hosts: {FORM}")
    if len(segments) > 2:
        raise BadRedisUrl(f"expected at most /MASTER/DB after the hosts: {FORM}")
    master = segments[0]
    db = _database(segments[1]) if len(segments) == 2 else 0
    options = dict(parse_qsl(query, keep_blank_values=True))
    unknown = sorted(set(options) - SENTINEL_OPTIONS - TLS_OPTIONS)
    if unknown:
        known = ", ".join(sorted(SENTINEL_OPTIONS | TLS_OPTIONS))
        raise BadRedisUrl(f"unknown option {unknown[0]!r} in the sentinel URL (known: {known})")
    tls = scheme == "sentinels"
    tls_options = {k: v for k, v in options.items() if k in TLS_OPTIONS}
    if tls_options and not tls:
        raise BadRedisUrl(f"{sorted(tls_options)[0]} needs TLS: write sentinels:// for it")
    if tls_options.get("ssl_cert_reqs", "required") not in CERT_REQS:
        raise BadRedisUrl(f"ssl_cert_reqs must be one of {', '.join(CERT_REQS)}")
    return SentinelDeployment(
        sentinels=sentinels,
        master=master,
        db=db,
        username=username,
        password=password,
        sentinel_username=options.get("sentinel_username") or None,
        sentinel_password=options.get("sentinel_password") or None,
        tls=tls,
        tls_options=tls_options,
    )


def sentinel_deployment(url: str) -> SentinelDeployment | None:
    """The Sentinel deployment ``url`` names; None for any other URL (left to the client
    that reads it: redis-py, or kombu's transport for its scheme)."""
    if url.split("://", 1)[0].lower() not in SENTINEL_SCHEMES:
        return None
    return parse_redis_url(url)


def _credentials(userinfo: str) -> tuple[str | None, str | None]:
    user, colon, password = userinfo.partition(":")
    return (unquote(user) or None, unquote(password) if colon else None)


def _sentinel_address(text: str) -> tuple[str, int]:
    if not text:
        raise BadRedisUrl(f"a sentinel's host is empty: {FORM}")
    try:
        parts = urlsplit(f"//{text}")
        host, port = parts.hostname, parts.port
    except ValueError:
        raise BadRedisUrl(f"cannot read the sentinel address {text!r}: {FORM}") from None
    if not host:
        raise BadRedisUrl(f"cannot read the sentinel address {text!r}: {FORM}")
    return host, port or DEFAULT_SENTINEL_PORT


def _database(text: str) -> int:
    if not text.isdigit():
        raise BadRedisUrl(f"the database after the master's name must be a number, got {text!r}")
    return int(text)


def printable_redis_url(url: str) -> str:
    """``url`` with its passwords (the data nodes' and ``sentinel_password``) masked."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "<unparsable URL>"
    netloc, slash, tail = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    if at and ":" in userinfo:
        userinfo = userinfo.split(":", 1)[0] + ":***"
    path, question, query = tail.partition("?")
    if question:
        pairs = [
            (k, "***" if k == "sentinel_password" else v)
            for k, v in parse_qsl(query, keep_blank_values=True)
        ]
        query = "&".join(f"{k}={v}" for k, v in pairs)
    return f"{scheme}://{userinfo}{at}{hosts}{slash}{path}{question}{query}"
