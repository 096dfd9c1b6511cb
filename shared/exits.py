"""How a ``tickwork`` command ends when something goes wrong: one exit status per kind of
error, decided here and nowhere else, and one clear line on stderr. Every command uses
it, the CLI's and the services' own (``tickwork api``).

=====  ============================================================================
code   meaning
=====  ============================================================================
0      done
1      a run or attempt failed (or a wait gave up)
2      bad usage or invalid input (click's own usage errors too)
3      not found (a project, workflow, schedule, attempt, task or log)
4      conflict with existing state (a session started twice, an attempt that ended)
5      a server tickwork needs cannot be reached: the API, the database or Redis
6      unauthorized: the API refused the token
130    interrupted (Ctrl-C)
=====  ============================================================================
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from enum import IntEnum
from typing import NoReturn

import click

from tickwork.shared.errors import (
    ApiUnavailable,
    Conflict,
    InvalidInput,
    InvalidStoreUrl,
    NotFound,
    StoreUnavailable,
    Unauthorized,
)


class ExitCode(IntEnum):
    """The exit statuses of ``tickwork`` (the table above)."""

    OK = 0
    FAILED = 1
    INVALID = 2
    NOT_FOUND = 3
    CONFLICT = 4
    UNAVAILABLE = 5
    UNAUTHORIZED = 6
    INTERRUPTED = 130


EXIT_CODES_HELP = (
    "\b\nExit status: 0 ok, 1 the run failed, 2 bad usage or invalid input, 3 not found,\n"
    "4 conflict, 5 the API cannot be reached or failed, 6 unauthorized."
)

_CODES: tuple[tuple[type[BaseException], ExitCode], ...] = (
    (InvalidInput, ExitCode.INVALID),
    (NotFound, ExitCode.NOT_FOUND),
    (Conflict, ExitCode.CONFLICT),
    (InvalidStoreUrl, ExitCode.INVALID),  # before StoreUnavailable, its parent
    (StoreUnavailable, ExitCode.UNAVAILABLE),
    (ApiUnavailable, ExitCode.UNAVAILABLE),
    (Unauthorized, ExitCode.UNAUTHORIZED),
    (KeyboardInterrupt, ExitCode.INTERRUPTED),
)


@dataclass(frozen=True)
class ExitStatus:
    """How a command that met an error ends: its exit code and the lines it prints."""

    code: ExitCode
    message: str


def exit_status(exc: BaseException) -> ExitStatus:
    """The exit status and message for ``exc``; any other error is invalid input (2)."""
    code = next((code for kind, code in _CODES if isinstance(exc, kind)), ExitCode.INVALID)
    if isinstance(exc, InvalidInput) and exc.problems:
        return ExitStatus(code, "\n".join(f"error: {problem}" for problem in exc.problems))
    if isinstance(exc, Conflict):
        return ExitStatus(code, f"error: {conflict_line(exc)}")
    if isinstance(exc, KeyboardInterrupt):
        return ExitStatus(code, "interrupted")
    return ExitStatus(code, f"error: {exc}")


def conflict_line(exc: Conflict) -> str:
    """The conflict's message, naming the existing attempt when the API named one."""
    message = str(exc) or "conflict"
    if exc.attempt_id and exc.attempt_id not in message:
        message += f" (attempt {exc.attempt_id})"
    return message


def exit_with(code: int, message: str) -> NoReturn:
    """Print ``message`` on stderr and exit with ``code``."""
    click.echo(message, err=True)
    sys.exit(code)


def fail(message: str, cause: BaseException | None = None) -> NoReturn:
    """Print ``message`` on stderr and exit with the status of ``cause``'s kind (the status
    of invalid input when there is no cause)."""
    exit_with(ExitCode.INVALID if cause is None else exit_status(cause).code, message)


def fail_unavailable(message: str) -> NoReturn:
    """Print ``message`` on stderr and exit with the status of a server out of reach (a
    Redis error, which is not in tickwork's error tree)."""
    exit_with(ExitCode.UNAVAILABLE, message)


def exit_for(exc: BaseException) -> NoReturn:
    """End the command as ``exc``'s kind says: its exit status and its message."""
    status = exit_status(exc)
    exit_with(status.code, status.message)
