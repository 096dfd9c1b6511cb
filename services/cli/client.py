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

from tickwork.services.cli.errors import ExitCode, exit_status, exit_with
from tickwork.shared.errors import InvalidInput, Problem, TickworkError, Unauthorized

if TYPE_CHECKING:
    from tickwork.services.cli.api_client import ApiClient

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
    base = chosen.rstrip("/")
    if base.endswith("/api"):
        exit_with(
            ExitCode.INVALID,
            f"error: the endpoint {chosen} should not end in /api: the commands add it; "
            f"use {base.removesuffix('/api')}",
        )
    return ClientSettings(chosen, token)


def client_options(command: F) -> F:
    """``-e/--endpoint`` and ``--json``, which every client command takes."""
    command = click.option(
        "--json", "as_json", is_flag=True, help="Print JSON (lists: one object per line)."
    )(command)
    return click.option(
        "-e",
        "--endpoint",
        envvar="TICKWORK_ENDPOINT",
        metavar="URL",
        help="The tickwork API (env TICKWORK_ENDPOINT, then the client config file; "
        f"default {DEFAULT_ENDPOINT}).",
    )(command)


def _refuse_database_url(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is None:
        return
    names = []
    level: click.Context | None = ctx
    while level is not None and level.parent is not None:
        names.append(level.info_name or "")
        level = level.parent
    command = " ".join(["tickwork", *reversed(names)])
    raise click.UsageError(
        f"--database-url is gone from `{command}`: run it against the API "
        "(--endpoint/TICKWORK_ENDPOINT), e.g. against `tickwork standalone`, or "
        "`tickwork api` serving that database (TICKWORK_DATABASE_URL)",
        ctx,
    )


def no_database_url(command: F) -> F:
    """``--database-url``, which the admin commands took when they could work on the store
    directly: given, it ends the command (exit 2) saying to use the API instead. Hidden from
    the help; ``TICKWORK_DATABASE_URL`` is not read (it names the servers' store)."""
    return click.option(
        "--database-url",
        hidden=True,
        expose_value=False,
        is_eager=True,
        callback=_refuse_database_url,
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


class RecordId(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.2 on
    """A positive whole number naming a record (an attempt, a session), checked before the
    API is asked, so that ``tickwork attempt abc`` names the argument at fault."""

    name = "id"

    def __init__(self, noun: str, kind: type[str] | type[int] = str) -> None:
        self.noun = noun
        self.kind = kind

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> str | int:
        """``value`` as ``kind`` (its digits, or the number); a usage error (exit 2)
        naming the argument for anything but a positive whole number."""
        digits = str(value).strip()
        if not digits.isascii() or not digits.isdigit() or int(digits) < 1:
            self.fail(f"{value!r} is not {_article(self.noun)} id (a positive whole number)")
        return self.kind(int(digits))


def _article(noun: str) -> str:
    return f"an {noun}" if noun[0] in "aeiou" else f"a {noun}"


ATTEMPT_ID = RecordId("attempt")
"""The type of an ``ID`` argument that names an attempt."""
SESSION_ID = RecordId("session")
"""The type of an ``ID`` option that names a session."""

POINTER_FLAGS = {
    "/session_time": "--session",
    "/params": "--param",
    "/idempotency_key": "--idempotency-key",
    "/from": "--from",
    "/to": "--to",
    "/count": "--count",
    "/replay": "--replay",
    "/mode": "--all/--resume/--from",
    "/revision": "--revision",
    "/name": "--name",
    "/project": "PROJECT",
    "/workflow": "WORKFLOW",
    "/value": "--value",
    "/slots": "SLOTS",
    "/description": "--description",
    "pool": "NAME",
    "state": "--state",
    "limit": "--limit",
    "revision": "--revision",
    "schedule_from": "--schedule-from",
}
"""The command-line flag that gave each field of an API request (a JSON pointer into the
body, or a query parameter), so that an error names what the user typed."""

_PYDANTIC_WORDING = (
    ("Value error, ", ""),
    ("Input should be a valid integer", "expected a whole number"),
    ("Input should be a valid string", "expected text"),
    ("Input should be a valid dictionary", "expected KEY=VALUE pairs"),
    ("Input should be a valid boolean", "expected yes or no"),
    ("Input should be ", "expected "),
    ("String should have ", "expected "),
    ("Field required", "missing"),
    ("Extra inputs are not permitted", "not an option of this command"),
)


def flag_problems(problems: list[Problem]) -> list[Problem]:
    """The API's problems with each place named by the flag that gave it
    (:data:`POINTER_FLAGS`) and validation wording made plain."""
    return [
        Problem(_flag_for(problem.file), problem.line, _plain(problem.message))
        for problem in problems
    ]


def _flag_for(place: str) -> str:
    for pointer, flag in POINTER_FLAGS.items():
        if place == pointer or place.startswith(pointer + "/"):
            return flag
    return place


def _plain(message: str) -> str:
    for wording, plain in _PYDANTIC_WORDING:
        if message.startswith(wording):
            return plain + message[len(wording) :]
    return message


@contextmanager
def api(endpoint: str | None) -> Iterator[ApiClient]:
    """A client of the API; every error it raises ends the command with one line and the
    exit status of its kind (:func:`tickwork.services.cli.errors.exit_status`). A problem with a
    field of a request is reported under the flag that gave it (:func:`flag_problems`)."""
    # httpx takes a fifth of a second to import: only a command that calls the API pays it.
    from tickwork.services.cli.api_client import ApiClient

    settings = read_settings(endpoint)
    client = ApiClient(settings.endpoint, settings.token)
    try:
        yield client
    except TickworkError as exc:
        if isinstance(exc, InvalidInput):
            exc = InvalidInput(flag_problems(exc.problems))
        status = exit_status(exc)
        message = status.message
        if isinstance(exc, Unauthorized):
            message += f" (set TICKWORK_API_TOKEN or token in {config_path()})"
        exit_with(status.code, message)
    finally:
        client.close()
