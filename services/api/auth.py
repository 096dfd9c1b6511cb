"""Bearer-token authentication and what each role may do.

A token is one of the environment's (``TICKWORK_API_TOKENS``, named ``env:...``) or one of
the store's (``tickwork tokens create``, shared/store/api_tokens.py). The environment's
are compared in constant time, all of them every time, so neither the timing nor the
order of the list tells a caller which token came close; a store token is looked up by the
SHA-256 of what was given, and a process trusts what it read for a second
(:data:`VERIFIED_SECONDS`), so a revoked or expired one stops working within a second on
every replica. Roles (:func:`required_role`): ``read`` may GET; ``operate`` may also start,
retry and kill attempts and pause, resume, skip and backfill schedules; ``admin`` may
also push and delete projects, manage secrets and tokens, and set and delete pools.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass
from datetime import datetime

from flask import g, request

from tickwork.services.api.config import ROLES, ApiConfig, ApiToken, Role
from tickwork.services.api.database import read_connection, write_transaction
from tickwork.services.api.errors import ApiProblem
from tickwork.services.api.ui import is_ui_path
from tickwork.shared.clock import utc_now
from tickwork.shared.store.api_tokens import (
    LAST_USED_INTERVAL,
    SECRET_PREFIX,
    StoredToken,
    covers,
    find_token_by_digest,
    note_token_used,
    secret_digest,
)

OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics", "/favicon.ico"})
# The OpenAPI document and its viewer describe the API and hold no data.
# Webhook triggers are called by other systems: their signature, not a token, says who.
OPEN_PREFIXES = ("/api/openapi.json", "/api/docs", "/api/hooks/")
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SECURITY_SCHEME_NAME = "BearerAuth"
SECURITY_SCHEMES = {
    SECURITY_SCHEME_NAME: {
        "type": "http",
        "scheme": "bearer",
        "description": "A token of TICKWORK_API_TOKENS or of `tickwork tokens create`: "
        "`read` tokens may use every GET, `operate` tokens also start, retry, kill and "
        "steer schedules, `admin` tokens every operation.",
    }
}
CHALLENGE = {"WWW-Authenticate": 'Bearer realm="tickwork"'}


ROLE_RANK: dict[Role, int] = {"read": 0, "operate": 1, "admin": 2}
ADMIN_BLUEPRINTS = frozenset({"secrets", "tokens", "audit"})
"""Blueprints of which every route, reads included, is an admin's."""
ADMIN_ENDPOINTS = frozenset(
    {
        "projects.push_project",
        "projects.remove_project",
        "ui_audit.audit_page",
        "pools.set_pool",
        "pools.delete_pool",
        "ui_pools.set_pool",
        "ui_pools.delete_pool",
    }
)
"""Other routes only an admin may use: pushing and deleting projects, the audit page,
setting and deleting pools."""


VERIFIED_SECONDS = 1.0
"""How long a process trusts a store token it has read, before reading it again: a revoked
or expired token is refused by every replica within this, and a busy token costs one read
a second per process, not one per request."""
VERIFIED_MAX = 4096
_verified: dict[str, tuple[float, Identity]] = {}  # digest -> (monotonic time read, identity)


@dataclass(frozen=True)
class Identity:
    """Who a request's token says it is: the token's name and role, whether it is a token
    of the store (revocable by name) or of the environment, and the globs of the projects
    it is limited to (none: every project)."""

    name: str
    role: Role
    stored: bool
    expires_at: datetime | None = None
    projects: tuple[str, ...] = ()

    def covers(self, project: str) -> bool:
        """Whether the token may see (and, by its role, act on) ``project``."""
        return covers(self.projects, project)


def forget_verified() -> None:
    """Read every store token again at its next request (this process revoked one)."""
    _verified.clear()


def required_role(endpoint: str | None, method: str) -> Role:
    """The least role that may call ``endpoint`` with ``method``."""
    blueprint = (endpoint or "").partition(".")[0]
    if blueprint in ADMIN_BLUEPRINTS or endpoint in ADMIN_ENDPOINTS:
        return "admin"
    return "read" if method in READ_METHODS else "operate"


def may(role: Role, required: Role) -> bool:
    """Whether ``role`` covers ``required``."""
    return ROLE_RANK[role] >= ROLE_RANK[required]


def identify(given: str, config: ApiConfig) -> Identity | None:
    """The identity of token ``given``: an environment token (constant time), else a live
    token of the store (one indexed read; its last use noted at most once a minute)."""
    token = match_token(given, config.tokens)
    if token is not None:
        return Identity(token.label, token.role, stored=False)
    if not given.startswith(SECRET_PREFIX):
        return None  # not a store token's shape: no read
    digest = secret_digest(given)
    clock = time.monotonic()
    known = _verified.get(digest)
    if known is not None and clock - known[0] < VERIFIED_SECONDS:
        return known[1]
    now = utc_now()
    with read_connection() as conn:
        found = find_token_by_digest(conn, digest, now)
    if found is None:
        _verified.pop(digest, None)
        return None
    if found.last_used_at is None or now - found.last_used_at >= LAST_USED_INTERVAL:
        with write_transaction() as conn:  # at most once a minute per token
            note_token_used(conn, found, now)
    identity = stored_identity(found)
    if identity is not None:
        if len(_verified) >= VERIFIED_MAX:
            _verified.clear()
        _verified[digest] = (clock, identity)
    return identity


def stored_identity(token: StoredToken) -> Identity | None:
    """The identity of a live token of the store; None for a role this server does not
    know (a row written by a newer release)."""
    for role in ROLES:
        if token.role == role:
            return Identity(token.name, role, True, token.expires_at, token.projects)
    return None


def is_open(path: str) -> bool:
    """Whether ``path`` is served without a token (probes, metrics, the API's own docs)."""
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)


def match_token(given: str, tokens: tuple[ApiToken, ...]) -> ApiToken | None:
    """The configured token equal to ``given``, compared against every one in constant time."""
    given_digest = hashlib.sha256(given.encode("utf-8", "surrogateescape")).digest()
    found: ApiToken | None = None
    for candidate in tokens:
        # Digests have one length, so compare_digest's time does not depend on the token's.
        digest = hashlib.sha256(candidate.token.encode()).digest()
        if hmac.compare_digest(given_digest, digest) and found is None:
            found = candidate
    return found


def authenticate(config: ApiConfig) -> None:
    """Set ``g.client`` (who is asking, for the rate limit); 401 or 403 when refused."""
    g.client = f"address:{request.remote_addr or 'unknown'}"
    if not config.auth_enabled or is_open(request.path) or is_ui_path(request.path):
        return  # the UI's pages sign in with a session cookie (services/api/ui/auth.py)
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        raise ApiProblem(
            401, "a bearer token is required (Authorization: Bearer TOKEN)", headers=CHALLENGE
        )
    identity = identify(given.strip(), config)
    if identity is None:
        raise ApiProblem(
            401,
            "the bearer token is not valid",
            headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
        )
    g.client = "token:" + hashlib.sha256(identity.name.encode()).hexdigest()[:16]
    g.identity = identity
    g.role = identity.role
    required = required_role(request.endpoint, request.method)
    if not may(identity.role, required):
        raise ApiProblem(
            403,
            f"token {identity.name} ({identity.role}) may not {request.method} "
            f"{request.path}: that needs an {required} token",
        )
