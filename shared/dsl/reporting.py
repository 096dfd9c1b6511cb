"""Collecting the problems of a workflow file, and checking the ``${...}`` in its values.

A :class:`Reporter` gathers :class:`Problem` s (file, line, message) instead of stopping at
the first one; the readers of sections and directives report through it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tickwork.shared.domain.expressions import check_template
from tickwork.shared.domain.schedule import suggest
from tickwork.shared.dsl.loader import FileLine, LineMap
from tickwork.shared.errors import InvalidExpression, InvalidWorkflow, Problem
from tickwork.shared.secrets import (
    SECRET_NAME,
    WHERE_ALLOWED,
    secret_references,
    without_secret_references,
)


@dataclass(frozen=True)
class Where:
    """Where a task body sits: its file (as reported), that file's folder, its parent kind."""

    file: str
    directory: Path
    in_parallel: bool = False


_KINDS = ((bool, "a boolean"), (int | float, "a number"), (str, "a string"), (dict, "a mapping"))


def describe(value: Any) -> str:
    """What kind of YAML value ``value`` is, for messages: ``a string``, ``a list``…"""
    fallback = "null" if value is None else "a list"
    return next((word for kind, word in _KINDS if isinstance(value, kind)), fallback)


def plain(value: Any) -> Any:
    """``value`` with every :class:`LineMap` turned into a plain dict."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def line_map(value: Any, source: str) -> Any:
    """Plain data as the loader would give it (mappings as :class:`LineMap`)."""
    if isinstance(value, dict):
        mapping = LineMap(FileLine(1, source))
        for key, item in value.items():
            mapping[key] = line_map(item, source)
        return mapping
    if isinstance(value, list):
        return [line_map(item, source) for item in value]
    return value


class Reporter:
    """Collects every problem found (:meth:`raise_problems` raises them as one error) and
    every warning (kept on the parsed workflow)."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.warnings: list[Problem] = []

    def warn(self, where: Where, line: int | None, message: str) -> None:
        """Record ``message`` at ``line`` as a warning: worth saying, not a reason to refuse."""
        file = line.file if isinstance(line, FileLine) else where.file
        self.warnings.append(Problem(file, line, message))

    def report(self, where: Where, line: int | None, message: str) -> None:
        """Record ``message`` at ``line`` of ``where``'s file."""
        # A line of an !include'd file names that file.
        file = line.file if isinstance(line, FileLine) else where.file
        self.problems.append(Problem(file, line, message))

    def raise_problems(self) -> None:
        """InvalidWorkflow with every problem recorded, by file and line; nothing if none."""
        if self.problems:
            unique = dict.fromkeys(self.problems)
            raise InvalidWorkflow(sorted(unique, key=lambda p: (p.file, p.line or 0)))

    def string_key(self, key: Any, body: LineMap, where: Where) -> bool:
        """Whether ``key`` is a string; reports it when it is not."""
        if not isinstance(key, str):
            self.report(where, body.line_of(key), f"key {key!r} must be a string (quote it)")
        return isinstance(key, str)

    def unknown_directive(
        self, key: str, body: LineMap, where: Where, candidates: Iterable[str]
    ) -> None:
        """Report ``key`` as an unknown directive, with the closest of ``candidates``."""
        hint = suggest(key, candidates)
        if not hint and not key.startswith("_"):
            hint = " (task names start with '+')"
        self.report(where, body.line_of(key), f"unknown directive '{key}'{hint}")

    def check_values(
        self, value: Any, line: int, where: Where, secrets_allowed: bool = False
    ) -> None:
        """Report every ``${...}`` in ``value`` that does not parse, and every
        ``${secret:name}`` where secrets may not stand, at its key's line."""
        if isinstance(value, str):
            if "${" in value:
                self._check_secrets(value, line, where, secrets_allowed)
                try:
                    check_template(without_secret_references(value))
                except InvalidExpression as exc:
                    self.report(where, line, str(exc))
        elif isinstance(value, LineMap):
            for key, item in value.items():
                self.check_values(item, value.line_of(key), where, secrets_allowed)
        elif isinstance(value, list):
            for item in value:
                self.check_values(item, line, where, secrets_allowed)
        elif value is not None and not isinstance(value, bool | int | float):
            self.report(where, line, f"unsupported YAML value {value!r}")

    def _check_secrets(self, text: str, line: int, where: Where, allowed: bool) -> None:
        for name in sorted(secret_references(text)):
            if not allowed:
                self.report(where, line, f"'${{secret:{name}}}': {WHERE_ALLOWED}")
            elif not SECRET_NAME.fullmatch(name):
                self.report(where, line, f"'${{secret:{name}}}': {name!r} is not a secret name")
