"""What every API-client command shares: where the API is, its token, and its client.

The endpoint comes from ``--endpoint``, else ``TICKWORK_ENDPOINT``, else the client
config file, else http://127.0.0.1:8765; the token from ``TICKWORK_API_TOKEN``, else the
config file (``$TICKWORK_CONFIG`` or ``~/.config/tickwork/client.toml``, holding
``endpoint = "..."`` and ``token = "..."``).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from services.cli.errors import ExitCode, exit_status, exit_with
from shared.errors import TickworkError, Unauthorized

if TYPE_CHECKING:
    from services.cli.api_client import ApiClient

DEFAULT_ENDPOINT = "http://127.0.0.1:8765"

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class ClientSettings:
    """Where the API is and how to authenticate to it."""

    endpoint: str
    token: str | None


def config_path() -> Path:
    """The client config file: ``$TICKWORK_CONFIG`` or ``~/.config/tickwork/client.toml``."""
    named = os.environ.get("TICKWORK_CONFIG")
    return Path(named) if named else Path.home() / ".config" / "tickwork" / "client.toml"


def read_settings(endpoint: str | None) -> ClientSettings:
    """Settings from the option (or TICKWORK_ENDPOINT), the environment and the config file."""
    path = config_path()
    file_values: dict[str, Any] = {}
    if path.is_file():
        try:
            file_values = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            exit_with(ExitCode.INVALID, f"error: {path}: {exc}")
    for key in ("endpoint", "token"):
        if key in file_values and not isinstance(file_values[key], str):
            exit_with(
                ExitCode.INVALID, f'error: {path}: {key} must be a string, like {key} = "..."'
            )
    token = os.environ.get("TICKWORK_API_TOKEN") or file_values.get("token") or None
    chosen = endpoint or file_values.get("endpoint") or DEFAULT_ENDPOINT
    if not chosen.startswith(("http://", "https://")):
        exit_with(ExitCode.INVALID, f"error: the endpoint {chosen!r} is not an http(s):// URL")
    return ClientSettings(chosen, token)


def client_options(command: F) -> F:
    """``--endpoint`` and ``--json``, which every client command takes."""
    command = click.option(
        "--json", "as_json", is_flag=True, help="Print JSON (lists: one object per line)."
    )(command)
    return click.option(
        "--endpoint",
        envvar="TICKWORK_ENDPOINT",
        metavar="URL",
        help="The tickwork API (env TICKWORK_ENDPOINT, then the client config file; "
        f"default {DEFAULT_ENDPOINT}).",
    )(command)


def limit_option(command: F) -> F:
    """``--limit N`` for listings."""
    return click.option(
        "--limit",
        type=click.IntRange(1, 100_000),
        default=50,
        show_default=True,
        help="List at most this many.",
    )(command)


@contextmanager
def api(endpoint: str | None) -> Iterator[ApiClient]:
    """A client of the API; every error it raises ends the command with one line and the
    exit status of its kind (:func:`services.cli.errors.exit_status`)."""
    # httpx takes a fifth of a second to import: only a command that calls the API pays it.
    from services.cli.api_client import ApiClient

    settings = read_settings(endpoint)
    client = ApiClient(settings.endpoint, settings.token)
    try:
        yield client
    except TickworkError as exc:
        status = exit_status(exc)
        message = status.message
        if isinstance(exc, Unauthorized):
            message += f" (set TICKWORK_API_TOKEN or token in {config_path()})"
        exit_with(status.code, message)
    finally:
        client.close()
