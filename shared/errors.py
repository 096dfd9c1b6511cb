"""The one error tree of tickwork: every error a user or an operator can meet.

The API turns each into a problem+json answer in one place (services/api/errors.py), the
CLI into an exit status and one line in one place (services/cli/errors.py). Exceptions
that only steer control flow inside one module stay private there (``_Outside`` in
shared/dsl/archive_links.py, ``Bad`` in shared/dsl/directives.py). A lost lease is not an
error raised: the agent's heartbeat thread finds it and calls ``Heartbeat.on_lost``
(shared/dispatch/leases.py), which stops the task without a report.
"""

from __future__ import annotations

from dataclasses import dataclass


class TickworkError(Exception):
    """Root of every error tickwork raises on purpose."""


class NotFound(TickworkError):
    """Raised when a project, workflow, session, attempt or task does not exist (API, CLI)."""


class Conflict(TickworkError):
    """Raised when a write collides with existing state (a duplicate name, a done attempt).

    ``attempt_id`` names the existing attempt when the collision is with one (a session
    started twice, an idempotency key used again).
    """

    def __init__(self, message: str = "", *, attempt_id: str | None = None) -> None:
        super().__init__(message)
        self.attempt_id = attempt_id


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input, and where: ``file:line: message``."""

    file: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.message}"


class InvalidInput(TickworkError):
    """Raised when user input is rejected before anything is written; carries every problem."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class InvalidWorkflow(InvalidInput):
    """Raised when a workflow file cannot be parsed or fails validation."""


class InvalidSchedule(TickworkError):
    """Raised when a schedule spec (cron, interval, time zone, window) is malformed.

    ``key`` names the offending field of the ``schedule:`` mapping ("" for the mapping
    itself), so a workflow file can report its line.
    """

    def __init__(self, message: str, key: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.key = key


class InvalidExpression(TickworkError):
    """Raised when a ``${...}`` expression cannot be parsed or refers to an unknown name."""


class UnknownValue(TickworkError, ValueError):
    """Raised when a value of a closed set (a state, a policy, a reason) read from stored
    data or a message is none of its values; the message names where it was read."""


class InvalidConfig(TickworkError):
    """Raised when an environment variable holds a value of the wrong form."""


class InvalidValue(TickworkError, ValueError):
    """Raised by the domain's parsers when one value has the wrong form (a duration, a
    ``_start_at`` time); the message says what was expected, and the caller, which knows
    the place, turns it into a :class:`Problem` or an :class:`InvalidSchedule`. Also a
    ``ValueError``, as a malformed value is."""


class StoreUnavailable(TickworkError):
    """Raised when the database cannot be reached or its schema is not migrated."""


class InvalidStoreUrl(StoreUnavailable):
    """Raised when a database URL is malformed or names a database tickwork does not use: a
    mistake in the configuration, not a server out of reach (a StoreUnavailable still, so
    that every caller that cannot open the store handles it alike)."""


class Unauthorized(TickworkError):
    """Raised by the API client when the API refuses its token (missing, wrong, or a
    ``read`` token used for a write)."""


class ApiUnavailable(TickworkError):
    """Raised by the API client when the API cannot be reached or answers with a server
    error."""


class TaskFailed(TickworkError):
    """Raised on an agent when a task cannot succeed; its message becomes the task's
    ``${error.message}`` (an operator's ``OperatorFailed``, an archive that cannot be had)."""
