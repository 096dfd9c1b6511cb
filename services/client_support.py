"""What every API-client command shares: endpoint and token, exit codes, output.

The endpoint comes from ``--endpoint``, else ``TICKWORK_ENDPOINT``, else the client
config file, else http://127.0.0.1:8765; the token from ``TICKWORK_API_TOKEN``, else the
config file (``$TICKWORK_CONFIG`` or ``~/.config/tickwork/client.toml``, holding
``endpoint = "..."`` and ``token = "..."``).
"""

from __future__ import annotations

import json
import os
import sys
import tomllib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
from rich.console import Console
from rich.table import Table

from services.api_client import DEFAULT_ENDPOINT, ApiClient
from shared.errors import (
    ApiUnavailable,
    Conflict,
    InvalidInput,
    NotFound,
    TickworkError,
    Unauthorized,
)

EXIT_FAILED = 1
EXIT_INVALID = 2
EXIT_NOT_FOUND = 3
EXIT_CONFLICT = 4
EXIT_UNAVAILABLE = 5
EXIT_UNAUTHORIZED = 6

EXIT_CODES_HELP = (
    "\b\nExit status: 0 ok, 1 the run failed, 2 bad usage or invalid input, 3 not found,\n"
    "4 conflict, 5 the API cannot be reached or failed, 6 unauthorized."
)

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
            exit_with(EXIT_INVALID, f"error: {path}: {exc}")
    for key in ("endpoint", "token"):
        if key in file_values and not isinstance(file_values[key], str):
            exit_with(EXIT_INVALID, f'error: {path}: {key} must be a string, like {key} = "..."')
    token = os.environ.get("TICKWORK_API_TOKEN") or file_values.get("token") or None
    chosen = endpoint or file_values.get("endpoint") or DEFAULT_ENDPOINT
    if not chosen.startswith(("http://", "https://")):
        exit_with(EXIT_INVALID, f"error: the endpoint {chosen!r} is not an http(s):// URL")
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


def exit_with(code: int, message: str) -> NoReturn:
    """Print one line on stderr and exit with ``code``."""
    click.echo(message, err=True)
    sys.exit(code)


@contextmanager
def api(endpoint: str | None) -> Iterator[ApiClient]:
    """A client of the API; every error it raises ends the command with one line and the
    exit status of its kind."""
    settings = read_settings(endpoint)
    client = ApiClient(settings.endpoint, settings.token)
    try:
        yield client
    except InvalidInput as exc:
        for problem in exc.problems:
            click.echo(f"error: {problem}", err=True)
        sys.exit(EXIT_INVALID)
    except NotFound as exc:
        exit_with(EXIT_NOT_FOUND, f"error: {exc}")
    except Conflict as exc:
        exit_with(EXIT_CONFLICT, f"error: {conflict_line(exc)}")
    except Unauthorized as exc:
        hint = "set TICKWORK_API_TOKEN or token in " + str(config_path())
        exit_with(EXIT_UNAUTHORIZED, f"error: {exc} ({hint})")
    except ApiUnavailable as exc:
        exit_with(EXIT_UNAVAILABLE, f"error: {exc}")
    except TickworkError as exc:
        exit_with(EXIT_INVALID, f"error: {exc}")
    finally:
        client.close()


def conflict_line(exc: Conflict) -> str:
    """The conflict's message, naming the existing attempt when the API named one."""
    message = str(exc) or "conflict"
    if exc.attempt_id and exc.attempt_id not in message:
        message += f" (attempt {exc.attempt_id})"
    return message


def print_json(value: Any) -> None:
    """One JSON document on one line."""
    click.echo(json.dumps(value, default=str))


def print_items(
    items: Iterable[dict[str, Any]],
    as_json: bool,
    columns: list[tuple[str, Callable[[dict[str, Any]], object]]],
) -> None:
    """A listing: JSON lines, or a table with one column per ``(title, cell)``."""
    if as_json:
        for item in items:
            print_json(item)
        return
    table = Table(*(title for title, _ in columns))
    for item in items:
        table.add_row(*(text(cell(item)) for _, cell in columns))
    Console(width=None if sys.stdout.isatty() else 200).print(table)


def print_fields(item: dict[str, Any], as_json: bool, fields: list[str]) -> None:
    """One object: JSON, or ``name: value`` lines for the fields it has."""
    if as_json:
        print_json(item)
        return
    width = max(len(name) for name in fields)
    for name in fields:
        if name in item:
            click.echo(f"{name + ':':<{width + 1}} {text(item[name])}")


def text(value: object) -> str:
    """A value as a table cell: ``-`` for nothing, JSON for structures."""
    if value is None or value == "":
        return "-"
    if isinstance(value, dict | list):
        return json.dumps(value, default=str)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def field(name: str, *alternatives: str) -> Callable[[dict[str, Any]], object]:
    """A cell taken from ``item[name]``, else the first alternative present; ``a.b`` nests."""

    def cell(item: dict[str, Any]) -> object:
        for key in (name, *alternatives):
            value: Any = item
            for part in key.split("."):
                value = value.get(part) if isinstance(value, dict) else None
            if value is not None:
                return value
        return None

    return cell
