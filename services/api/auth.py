"""Bearer-token authentication: ``read`` tokens may GET, ``admin`` tokens may do anything.

Every configured token is compared in constant time, all of them every time, so neither
the timing nor the order of the list tells a caller which token came close.
"""

from __future__ import annotations

import hashlib
import hmac

from flask import g, request

from tickwork.services.api.config import ApiConfig, ApiToken
from tickwork.services.api.errors import ApiProblem
from tickwork.services.api.ui import is_ui_path

OPEN_PATHS = frozenset({"/healthz", "/readyz", "/metrics", "/favicon.ico"})
# The OpenAPI document and its viewer describe the API and hold no data.
OPEN_PREFIXES = ("/api/openapi.json", "/api/docs")
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SECURITY_SCHEME_NAME = "BearerAuth"
SECURITY_SCHEMES = {
    SECURITY_SCHEME_NAME: {
        "type": "http",
        "scheme": "bearer",
        "description": "A token of TICKWORK_API_TOKENS: `read` tokens may use every GET, "
        "`admin` tokens every operation.",
    }
}
CHALLENGE = {"WWW-Authenticate": 'Bearer realm="tickwork"'}


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
    token = match_token(given.strip(), config.tokens)
    if token is None:
        raise ApiProblem(
            401,
            "the bearer token is not valid",
            headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
        )
    g.client = "token:" + hashlib.sha256(token.token.encode()).hexdigest()[:16]
    g.role = token.role
    if token.role != "admin" and request.method not in READ_METHODS:
        raise ApiProblem(403, f"a {token.role} token may not {request.method}; use an admin token")
