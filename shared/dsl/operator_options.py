"""Checking an operator task's options against its entry in the operator registry.

The registry (:mod:`shared.domain.operators`) says what each operator's command must be,
where secrets may stand and which control directives it takes; this module checks a
task body written in a workflow file against that, reporting with file and line.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import PurePosixPath
from typing import Any

from shared.domain.control import MAX_WAIT_SECONDS
from shared.domain.durations import BadDuration, parse_duration
from shared.domain.operators import REGISTRY, CommandKind, ControlShape, OperatorSpec
from shared.domain.workflow import TaskSpec
from shared.dsl.loader import LineMap
from shared.dsl.reporting import Reporter, Where, describe, plain
from shared.dsl.task_directives import read_parallel

CONTROL_DIRECTIVES = ("_do", "_else_do", "_parallel")
"""The directives a control operator (``loop>``, ``if>``…) takes besides the usual ones."""
PY_TARGET = re.compile(r"\A[A-Za-z_][\w.]*\.[A-Za-z_]\w*\Z")
OPERATOR_KEYS = tuple(spec.key for spec in REGISTRY.values())
"""Every operator as a workflow writes it (``sh>``), for "did you mean" hints."""
_ELSE_DO_OPERATORS = " or ".join(
    f"'{spec.key}'" for spec in REGISTRY.values() if spec.control and spec.control.takes_else_do
)

ReadBody = Callable[[str, str, LineMap, Where], TaskSpec | None]
"""Reads the task or group under a directive: (task name, directive, body, where)."""


def extra_directives(spec: OperatorSpec | None) -> tuple[str, ...]:
    """The directives an operator task takes besides every task's (none if unknown)."""
    return CONTROL_DIRECTIVES if spec is not None and spec.control is not None else ()


def param_takes_secrets(spec: OperatorSpec | None, key: str) -> bool:
    """Whether ``${secret:name}`` may stand in the param ``key`` of the operator."""
    return spec is not None and key in spec.secret_params


def check_command(
    reporter: Reporter, spec: OperatorSpec, command: Any, line: int, where: Where
) -> Any:
    """The command to store for ``spec``, reporting what its kind does not accept.

    ``call>`` (a workflow file to read) is the parser's; this handles every other kind.
    """
    kind = spec.command
    if kind is CommandKind.IGNORED:
        return None  # `nop>:` takes no command; whatever follows is ignored, as in Digdag
    if kind is CommandKind.DURATION and not (isinstance(command, str) and "${" in command):
        try:
            parse_duration(command, maximum=MAX_WAIT_SECONDS)
        except BadDuration as exc:
            reporter.report(where, line, f"'{spec.key}' {exc}")
        return command
    if kind is CommandKind.CONTROL_VALUE:
        # A count, a mapping or a boolean, or ${...} giving one: checked once rendered.
        if isinstance(command, LineMap):
            reporter.check_values(command, line, where)
            return plain(command)
        if isinstance(command, str):
            reporter.check_values(command, line, where)
        return command
    if kind is CommandKind.PY_TARGET:
        if not isinstance(command, str) or not PY_TARGET.fullmatch(command):
            reporter.report(where, line, f"'{spec.key}' needs module.function, got {command!r}")
        return command
    # TEXT, and a DURATION given as ${...} (checked once rendered)
    if isinstance(command, int | float) and not isinstance(command, bool):
        command = str(command)
    if not isinstance(command, str):
        reporter.report(where, line, f"'{spec.key}' needs a string, got {describe(command)}")
        return command
    reporter.check_values(command, line, where, secrets_allowed=spec.secrets_in_command)
    return command


def read_control(
    reporter: Reporter,
    spec: OperatorSpec,
    shape: ControlShape,
    task_name: str,
    body: LineMap,
    where: Where,
    read_body: ReadBody,
) -> dict[str, Any]:
    """``_do``, ``_else_do`` and ``_parallel`` of a control operator, as TaskSpec fields."""
    fields: dict[str, Any] = {}
    outside = replace(where, in_parallel=False)
    if "_do" in body:
        fields["do"] = read_body("+do", "_do", body, outside)
    if "_else_do" in body and not shape.takes_else_do:
        message = f"'_else_do' is only valid on {_ELSE_DO_OPERATORS}"
        reporter.report(where, body.line_of("_else_do"), message)
    elif "_else_do" in body:
        fields["else_do"] = read_body("+else_do", "_else_do", body, outside)
    if "_do" not in body and "_else_do" not in body:
        needs = "'_do' or '_else_do'" if shape.takes_else_do else "'_do'"
        message = f"'{spec.key}' in '{task_name}' needs {needs}"
        reporter.report(where, body.line_of(spec.key), message)
    if "_parallel" in body:
        if not shape.takes_parallel:
            message = f"'_parallel' is not valid on '{spec.key}'"
            reporter.report(where, body.line_of("_parallel"), message)
        elif isinstance(body["_parallel"], str) and "${" in body["_parallel"]:
            reporter.check_values(body["_parallel"], body.line_of("_parallel"), where)
            fields["parallel_expr"] = body["_parallel"]
        else:
            fields["parallel"], fields["parallel_limit"] = read_parallel(reporter, body, where)
    return fields


PG_MODIFIERS = ("create_table", "insert_into", "download_file", "store_last_results")
"""The ``pg>`` options of which a task may give one only (as in Digdag)."""
_PG_TEXT = (
    "create_table",
    "insert_into",
    "download_file",
    "database",
    "host",
    "user",
    "schema",
    "status_table",
    "status_table_schema",
)
_PG_FLAGS = ("ssl", "strict_transaction")
_PG_DURATIONS = ("connect_timeout", "status_table_cleanup")


def check_operator_params(reporter: Reporter, operator: str, body: LineMap, where: Where) -> None:
    """Check the options of the operators that declare some (``pg>``), at their lines."""
    if operator == "pg":
        _check_pg(reporter, body, where)


def _check_pg(reporter: Reporter, body: LineMap, where: Where) -> None:
    def bad(key: str, message: str) -> None:
        reporter.report(where, body.line_of(key), f"'pg>' {key} {message}")

    for key in (k for k in body if isinstance(k, str)):
        value = body[key]
        if isinstance(value, str) and "${" in value:
            continue  # checked when the task runs
        if key in _PG_TEXT and not (isinstance(value, str) and value.strip()):
            bad(key, f"must be a non-empty string, got {_shown(value)}")
        elif key in _PG_FLAGS and not _is_flag(value):
            bad(key, f"must be true or false, got {_shown(value)}")
        elif key in _PG_DURATIONS and not _is_duration(value):
            bad(key, f"must be a duration (30s, 1m, or seconds), got {_shown(value)}")
        elif key == "port" and not _is_port(value):
            bad(key, f"must be a port number, got {_shown(value)}")
        elif key == "store_last_results" and str(value).lower() not in ("false", "first", "all"):
            bad(key, f"must be false, first or all, got {_shown(value)}")
        elif key == "download_file" and _escapes(value):
            bad(key, f"must be a relative path inside the task's directory, got {value!r}")
    given = [key for key in PG_MODIFIERS if key in body and _pg_modifier_set(body[key])]
    for key in given[1:]:
        bad(key, f"can't be used together with {given[0]}")


def _shown(value: Any) -> str:
    return repr(value) if isinstance(value, str | int | float | bool) else describe(value)


def _pg_modifier_set(value: Any) -> bool:
    return value is not None and str(value).lower() != "false"


def _is_flag(value: Any) -> bool:
    return isinstance(value, bool) or str(value).lower() in ("true", "false")


def _is_duration(value: Any) -> bool:
    try:
        parse_duration(value, minimum=1)
    except BadDuration:
        return False
    return True


def _is_port(value: Any) -> bool:
    text = str(value)
    return not isinstance(value, bool) and text.isdigit() and 0 < int(text) < 65536


def _escapes(value: str) -> bool:
    path = PurePosixPath(value)
    return path.is_absolute() or ".." in path.parts or value.startswith("~")
