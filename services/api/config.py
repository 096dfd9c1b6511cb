"""Settings of the REST API service, read once from ``TICKWORK_*`` environment variables."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from tickwork.shared.config import Setting, SettingValues, count_setting, invalid, positive_int
from tickwork.shared.store.api_tokens import NAME_PATTERN as TOKEN_NAME

Role = Literal["read", "operate", "admin"]
ROLES: tuple[Role, ...] = ("read", "operate", "admin")


def _switch(values: Mapping[str, str], name: str) -> bool:
    raw = values[name].strip().lower()
    if raw not in ("on", "off"):
        raise invalid(name, f"expected on or off, got {values[name]!r}")
    return raw == "on"


def _stripped(values: Mapping[str, str], name: str) -> str:
    return values[name].strip()


API_SETTINGS = (
    Setting("TICKWORK_DATABASE_URL", "", "the store (PostgreSQL, or SQLite for a single process)"),
    Setting(
        "TICKWORK_API_TOKENS",
        "",
        "comma-separated [NAME=]ROLE:TOKEN, ROLE read, operate or admin; named env:NAME "
        "(else env:ROLE)",
    ),
    Setting("TICKWORK_API_TOKENS_FILE", "", "a file of [NAME=]ROLE:TOKEN lines (# comments)"),
    Setting(
        "TICKWORK_API_AUTH", "on", "on: every request but probes needs a token; off: none", _switch
    ),
    Setting(
        "TICKWORK_API_MAX_ARCHIVE_MB",
        "64",
        "largest project archive accepted, in MiB",
        positive_int,
    ),
    Setting("TICKWORK_API_MAX_JSON_KB", "1024", "largest JSON body accepted, in KiB", positive_int),
    Setting(
        "TICKWORK_API_RATE_LIMIT",
        "50",
        "requests per second per token or client; 0: off",
        count_setting,
    ),
    Setting(
        "TICKWORK_SECRET_KEY",
        "",
        "encrypts project secrets; signs the web UI's cookies",
        _stripped,
    ),
    Setting("TICKWORK_API_PAGE_LIMIT", "1000", "largest `limit` of a list", positive_int),
    Setting(
        "TICKWORK_API_MAX_FOLLOWS",
        "500",
        "log follow streams one worker serves at once",
        positive_int,
    ),
)
"""Every variable ``tickwork api`` reads, with its default and meaning."""


@dataclass(frozen=True)
class ApiToken:
    """One bearer token of the environment and what it may do: ``read`` every GET,
    ``operate`` also start, retry, kill and steer schedules, ``admin`` everything. Its
    name (``env:NAME``, else ``env:ROLE``, numbered from the second of a role) says who
    acted in logs and ``tickwork whoami``."""

    role: Role
    token: str = field(repr=False)
    name: str = ""

    @property
    def label(self) -> str:
        """The token's name, ``env:ROLE`` for one made without a name."""
        return self.name or f"env:{self.role}"


@dataclass(frozen=True)
class ApiConfig:
    """Settings of ``tickwork api`` (and of the API inside ``tickwork standalone``)."""

    database_url: str
    tokens: tuple[ApiToken, ...] = ()
    auth_enabled: bool = True
    max_archive_bytes: int = 64 * 1024 * 1024
    max_json_bytes: int = 1024 * 1024
    rate_limit_per_second: int = 50
    page_limit: int = 1000
    max_follow_streams: int = 500
    secret_key: str = field(default="", repr=False)
    # Signs the web UI's cookies when neither a secret key nor a token is configured: made
    # once per server, before gunicorn forks, so every worker of it shares it.
    fallback_session_key: bytes = field(
        default_factory=lambda: secrets.token_bytes(32), repr=False, compare=False
    )

    @property
    def rate_limit_burst(self) -> int:
        """Requests a token may make at once before the rate applies: twice the rate."""
        return 2 * self.rate_limit_per_second

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> ApiConfig:
        """Read the settings; raises InvalidConfig naming the variable on a bad value."""
        values = SettingValues(API_SETTINGS, environ)
        return cls(
            database_url=values.text("database_url"),
            tokens=_tokens(values.raw),
            auth_enabled=values.value("api_auth"),
            max_archive_bytes=values.value("api_max_archive_mb") * 1024 * 1024,
            max_json_bytes=values.value("api_max_json_kb") * 1024,
            rate_limit_per_second=values.value("api_rate_limit"),
            page_limit=values.value("api_page_limit"),
            max_follow_streams=values.value("api_max_follows"),
            secret_key=values.value("secret_key"),
        )


def _tokens(values: Mapping[str, str]) -> tuple[ApiToken, ...]:
    name = "TICKWORK_API_TOKENS"
    tokens = [_token(name, None, item) for item in values[name].split(",") if item.strip()]
    path = values["TICKWORK_API_TOKENS_FILE"]
    if path:
        tokens.extend(_tokens_file(Path(path)))
    return _named(tokens)


def _named(tokens: list[ApiToken]) -> tuple[ApiToken, ...]:
    """Each token with its name: ``env:NAME`` as given, else ``env:ROLE``, the second and
    later of one role numbered (``env:admin-2``); a name given twice is refused."""
    named: list[ApiToken] = []
    seen: set[str] = set()
    per_role: dict[str, int] = {}
    for token in tokens:
        if token.name:
            name = f"env:{token.name}"
            if name in seen:
                raise invalid("TICKWORK_API_TOKENS", f"two tokens are named {token.name!r}")
        else:
            per_role[token.role] = per_role.get(token.role, 0) + 1
            count = per_role[token.role]
            name = f"env:{token.role}" if count == 1 else f"env:{token.role}-{count}"
        seen.add(name)
        named.append(replace(token, name=name))
    return tuple(named)


def _tokens_file(path: Path) -> list[ApiToken]:
    name = "TICKWORK_API_TOKENS_FILE"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise invalid(name, f"cannot read {path}: {reason}") from None
    tokens = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            tokens.append(_token(name, number, stripped))
    return tokens


def _token(name: str, line: int | None, item: str) -> ApiToken:
    # The token itself is never echoed in an error: it is a secret.
    where = name if line is None else f"{name} line {line}"
    given_name, equals, rest = item.strip().partition("=")
    if not equals or ":" in given_name:  # no name (a token may hold "=" itself)
        given_name, rest = "", item.strip()
    role, sep, token = rest.partition(":")
    if not sep or role not in ROLES:
        raise invalid(where, "expected [NAME=]ROLE:TOKEN with ROLE read, operate or admin")
    if given_name and not TOKEN_NAME.fullmatch(given_name):
        raise invalid(where, "a token's NAME is 1-64 letters, digits, '.', '_' or '-'")
    if len(token) < 8 or any(ch.isspace() for ch in token):
        raise invalid(where, f"the {role} token must be 8 or more characters, no spaces")
    return ApiToken(role, token, given_name)
