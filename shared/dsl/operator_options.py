"""Checking an operator task's options against its entry in the operator registry.

The registry (:mod:`tickwork.shared.domain.operators`) says what each operator's command must be,
where secrets may stand and which control directives it takes; this module checks a
task body written in a workflow file against that, reporting with file and line.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import PurePosixPath
from typing import Any

from tickwork.shared.domain.control import (
    MAX_WAIT_SECONDS,
    BadControl,
    wait_blocking,
    wait_options,
    wait_poll_interval,
)
from tickwork.shared.domain.control import check_command as check_control_command
from tickwork.shared.domain.durations import BadDuration, parse_duration
from tickwork.shared.domain.operators import (
    REGISTRY,
    CommandKind,
    ControlShape,
    OperatorSpec,
    OptionKind,
)
from tickwork.shared.domain.schedule import suggest
from tickwork.shared.domain.workflow import TaskSpec
from tickwork.shared.dsl.loader import LineMap
from tickwork.shared.dsl.reporting import Reporter, Where, describe, plain
from tickwork.shared.dsl.task_directives import read_parallel

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
        return _control_command(reporter, spec, command, line, where)
    if kind is CommandKind.PY_TARGET:
        if not isinstance(command, str) or not PY_TARGET.fullmatch(command):
            reporter.report(where, line, f"'{spec.key}' needs module.function, got {command!r}")
        return command
    if kind is CommandKind.TEXT_OR_DATA and isinstance(command, LineMap):
        return _data_command(reporter, spec, command, line, where)
    # TEXT, and a DURATION given as ${...} (checked once rendered)
    if isinstance(command, int | float) and not isinstance(command, bool):
        command = str(command)
    if not isinstance(command, str):
        reporter.report(where, line, f"'{spec.key}' needs a string, got {describe(command)}")
        return command
    reporter.check_values(command, line, where, secrets_allowed=spec.secrets_in_command)
    return command


def _data_command(
    reporter: Reporter, spec: OperatorSpec, command: LineMap, line: int, where: Where
) -> Any:
    """``{data: TEXT}``: the text itself in place of a file's name (Digdag's form)."""
    data = command.get("data")
    if set(command) != {"data"} or not isinstance(data, str | int | float):
        message = (
            f"'{spec.key}' needs a file name or {{data: TEXT}}, got {describe(plain(command))}"
        )
        reporter.report(where, line, message)
        return plain(command)
    text = str(data) if not isinstance(data, str) else data
    reporter.check_values(text, command.line_of("data"), where)
    return {"data": text}


def _control_command(
    reporter: Reporter, spec: OperatorSpec, command: Any, line: int, where: Where
) -> Any:
    """A count, a mapping or a boolean; one holding ${...} is checked once rendered."""
    if isinstance(command, LineMap):
        reporter.check_values(command, line, where)
        command = plain(command)
    elif isinstance(command, str):
        reporter.check_values(command, line, where)
    if "${" not in repr(command):
        try:
            check_control_command(spec.name, command)
        except BadControl as exc:
            reporter.report(where, line, str(exc))
    return command


def is_shell_list(value: Any) -> bool:
    """Whether ``value`` is a valid ``sh>`` ``shell:`` option: a non-empty list of non-empty
    strings (``[bash, -c]``)."""
    return isinstance(value, list) and bool(value) and all(isinstance(v, str) and v for v in value)


def check_sh_options(reporter: Reporter, body: LineMap, where: Where) -> None:
    """Report a ``shell:`` option of an ``sh>`` task that is not a list of strings."""
    if "shell" in body and not is_shell_list(plain(body["shell"])):
        message = f"'sh>' shell must be a non-empty list of strings, got {describe(body['shell'])}"
        reporter.report(where, body.line_of("shell"), message)


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


WAIT_OPTIONS = ("blocking", "poll_interval")
"""The options of ``wait>`` checked when the file is read (``${...}`` ones once rendered)."""


def check_options(
    reporter: Reporter, spec: OperatorSpec | None, name: str, body: LineMap, where: Where
) -> None:
    """Report an operator's literal option values that the operator would refuse (the
    task is ``name``), and warn of a key it does not read."""
    if spec is not None:
        _check_declared(reporter, spec, body, where)
    if spec is not None and spec.name in _PARAM_STORE:
        check_param_store_options(reporter, spec, name, body, where)
    elif spec is not None and spec.name == "wait":
        _check_wait(reporter, body, where)
    elif spec is not None and spec.name == "sh":
        check_sh_options(reporter, body, where)
    elif spec is not None and spec.name == "pg":
        _check_pg(reporter, body, where)


CHECKED_ON_THEIR_OWN = frozenset({"pg", "wait", "sh", "param_set", "param_get"})
"""Operators whose options have checks of their own below (the registry's kinds are not
checked again for them)."""
_TEMPLATE = re.compile(r"\$\{([^}]*)\}")


def _check_declared(reporter: Reporter, spec: OperatorSpec, body: LineMap, where: Where) -> None:
    """Each key of the task against the operator's options (the registry's): a literal
    value of the wrong kind is a problem; a key the operator does not read, that none of
    the task's own ``${...}`` uses, is a warning (Digdag's "Parameter not used"), unless
    what it runs reads params of its own."""
    used: str | None = None  # the task's ${...} text, read when a key needs it
    for key in body:
        if not isinstance(key, str) or key.startswith("_") or key.endswith(">"):
            continue  # directives and the operator itself
        value, line = body[key], body.line_of(key)
        kind = spec.options.get(key)
        if kind is not None:
            if spec.name in CHECKED_ON_THEIR_OWN:
                continue
            literal = plain(value)
            if "${" not in repr(literal) and not is_kind(literal, kind):
                message = f"'{spec.key}' {key} must be {kind.value}, got {_shown(value)}"
                reporter.report(where, line, message)
        elif not spec.takes_params:
            if used is None:
                used = " ".join(_templates(plain(body)))
            if re.search(rf"\b{re.escape(key)}\b", used):
                continue
            hint = suggest(key, spec.options)
            reporter.warn(
                where,
                line,
                f"'{spec.key}' does not read '{key}'{hint} and no ${{...}} of the task uses "
                "it (Digdag: parameter not used)",
            )


def _templates(value: Any) -> Iterator[str]:
    """The inside of every ``${...}`` in ``value`` (strings, mappings, lists)."""
    if isinstance(value, str):
        yield from _TEMPLATE.findall(value)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _templates(item)
    elif isinstance(value, list):
        for item in value:
            yield from _templates(item)


def is_kind(value: Any, kind: OptionKind) -> bool:
    """Whether a literal ``value`` is of ``kind``."""
    return _KIND_CHECKS[kind](value)


def _is_text(value: Any) -> bool:
    return isinstance(value, str) or (
        isinstance(value, int | float) and not isinstance(value, bool)
    )


_KIND_CHECKS: dict[OptionKind, Callable[[Any], bool]] = {
    OptionKind.ANY: lambda _value: True,
    OptionKind.TEXT: _is_text,
    OptionKind.FLAG: lambda v: isinstance(v, bool) or str(v).lower() in ("true", "false"),
    OptionKind.NUMBER: lambda v: (
        not isinstance(v, bool) and (isinstance(v, int | float) or _is_number_text(v))
    ),
    OptionKind.DURATION: lambda v: _is_duration(v),
    OptionKind.MAPPING: lambda v: isinstance(v, dict),
    OptionKind.LIST: lambda v: isinstance(v, list),
    OptionKind.TEXT_OR_LIST: lambda v: _is_text(v) or isinstance(v, list),
    OptionKind.TEXT_OR_MAPPING: lambda v: _is_text(v) or isinstance(v, dict),
    OptionKind.LIST_OR_MAPPING: lambda v: isinstance(v, list | dict),
}


def _is_number_text(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return isinstance(value, str)


def _check_wait(reporter: Reporter, body: LineMap, where: Where) -> None:
    """``blocking`` true or false, ``poll_interval`` a duration, not both with blocking."""
    literal = {
        key: body[key]
        for key in WAIT_OPTIONS
        if body.get(key) is not None and "${" not in repr(body[key])
    }
    checks = {"blocking": wait_blocking, "poll_interval": wait_poll_interval}
    for key, value in literal.items():
        try:
            checks[key](value)
        except BadControl as exc:
            reporter.report(where, body.line_of(key), str(exc))
            return
    if len(literal) == len(WAIT_OPTIONS):
        try:
            wait_options(literal)
        except BadControl as exc:
            reporter.report(where, body.line_of("poll_interval"), str(exc))


PARAM_KEY = re.compile(r"\A(?=.*\S)[^\x00-\x1f\x7f]{1,255}\Z", re.DOTALL)
"""A persistent param's key, and ``param_get>``'s destination: 1 to 255 characters, not
all blank, no control characters."""
_PARAM_STORE = ("param_set", "param_get")
_PARAM_KEY_RULE = "must be 1 to 255 characters, not blank, without control characters"


def check_param_store_options(
    reporter: Reporter, spec: OperatorSpec | None, name: str, body: LineMap, where: Where
) -> None:
    """``param_set>`` (``key: value``) and ``param_get>`` (``key: destination param``): at
    least one key, each a :data:`PARAM_KEY`; a value is a scalar, a destination a param name.
    A null value or destination is skipped when the task runs, as in Digdag."""
    if spec is None or spec.name not in _PARAM_STORE:
        return
    keys = [k for k in body if isinstance(k, str) and not k.startswith(("_", "+"))]
    keys = [k for k in keys if not k.endswith(">")]
    if not keys:
        message = f"'{spec.key}' in '{name}' needs at least one key"
        reporter.report(where, body.line_of(spec.key if spec.key in body else "_type"), message)
    for key in keys:
        line, value = body.line_of(key), body[key]
        if not PARAM_KEY.fullmatch(key):
            message = f"'{spec.key}' key {key!r} {_PARAM_KEY_RULE}"
            reporter.report(where, line, message)
        if spec.name == "param_set" and isinstance(value, dict | list):
            message = f"'{spec.key}' value of '{key}' must be a string, got {describe(value)}"
            reporter.report(where, line, message)
        elif (
            spec.name == "param_get"
            and value is not None
            and not (isinstance(value, str) and PARAM_KEY.fullmatch(value))
        ):
            message = f"'{spec.key}' needs a param name to store '{key}' in, got {value!r}"
            reporter.report(where, line, message)


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
    "password_override",
)
_PG_FLAGS = ("ssl", "strict_transaction")
_PG_DURATIONS = ("connect_timeout", "socket_timeout", "status_table_cleanup")


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
