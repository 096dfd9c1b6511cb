"""The CLI's side of how a ``tickwork`` command ends when something goes wrong: the root
group that turns an error of tickwork's tree into its exit status and one line, and
``did you mean`` hints. The exit statuses themselves are in :mod:`tickwork.shared.exits`.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

import click

from tickwork.services.cli.lazy import LazyGroup
from tickwork.shared.errors import TickworkError
from tickwork.shared.exits import (
    EXIT_CODES_HELP,
    ExitCode,
    ExitStatus,
    conflict_line,
    exit_for,
    exit_status,
    exit_with,
    fail,
    fail_unavailable,
)

__all__ = [
    "EXIT_CODES_HELP",
    "ErrorMappingGroup",
    "ExitCode",
    "ExitStatus",
    "conflict_line",
    "did_you_mean",
    "exit_for",
    "exit_status",
    "exit_with",
    "fail",
    "fail_unavailable",
]


def did_you_mean(word: str, names: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` naming the closest of ``names`` to ``word``, or nothing."""
    close = difflib.get_close_matches(word, list(names), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


class ErrorMappingGroup(LazyGroup):
    """The root group: an error of tickwork's tree that a command lets through ends the
    command with its exit status and one line, not a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except TickworkError as exc:
            exit_for(exc)
