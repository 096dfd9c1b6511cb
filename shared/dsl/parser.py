"""Turn ``*.dig`` workflow files into :class:`WorkflowDefinition` trees, with file:line errors.

Parsing never stops at the first mistake: every problem of every file (including files
reached through ``call>``) is collected and raised as one :class:`InvalidWorkflow`, sorted
by file and line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from shared.domain.control import CONTROL_OPERATORS, MAX_WAIT_SECONDS
from shared.domain.delays import StartRule
from shared.domain.durations import BadDuration, parse_duration
from shared.domain.expressions import check_template
from shared.domain.schedule import parse_schedule, resolve_timezone, suggest
from shared.domain.sla import SLA_TASK_NAME
from shared.domain.workflow import (
    OPERATORS,
    QUEUE_NAME,
    RetryPolicy,
    TaskSpec,
    WorkflowDefinition,
)
from shared.dsl.directives import (
    Bad,
    delay_seconds,
    find_cycle,
    flag,
    parallel_value,
    retry_policy,
    start_at,
)
from shared.dsl.loader import FileLine, IncludeContext, LineMap, file_size_problem, load_yaml
from shared.dsl.names import shown, workflow_name_problem
from shared.dsl.sla import read_sla
from shared.errors import InvalidExpression, InvalidSchedule, InvalidWorkflow, Problem
from shared.secrets import (
    SECRET_NAME,
    SECRET_PARAMS,
    WHERE_ALLOWED,
    secret_references,
    without_secret_references,
)

DELAY_DIRECTIVES = ("_delay", "_start_at")
TOP_LEVEL_KEYS = (
    "timezone",
    "schedule",
    "_export",
    "_error",
    "_check",
    "_retry",
    "_parallel",
    "_queue",
    "sla",
    *DELAY_DIRECTIVES,
)
GROUP_DIRECTIVES = (
    "_parallel",
    "_background",
    "_after",
    "_error",
    "_check",
    "_retry",
    "_export",
    "_queue",
    "_env",
    "_disable",
    *DELAY_DIRECTIVES,
)
OPERATOR_DIRECTIVES = (*GROUP_DIRECTIVES[1:], "_type", "_command", "_timeout")
CONTROL_DIRECTIVES = ("_do", "_else_do", "_parallel")
MAX_TIMEOUT_SECONDS = 31 * 24 * 3600
ENV_NAME = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")
# '+' and '^' join the parts of a full name (+wf+group^error); the rest cannot be shown.
_BAD_NAME_CHARACTER = re.compile(r"[+^\x00-\x1f\x7f]")
PY_TARGET = re.compile(r"\A[A-Za-z_][\w.]*\.[A-Za-z_]\w*\Z")
_OPERATOR_KEYS = tuple(f"{name}>" for name in OPERATORS)


def parse_workflow_file(path: Path, project_dir: Path) -> WorkflowDefinition:
    """Parse the workflow in ``path`` (named after the file's stem) inside ``project_dir``."""
    parser = _ProjectParser(project_dir)
    definition = parser.parse_file(path.resolve())
    return parser.result(definition)


def parse_workflow_text(text: str, filename: str, project_dir: Path) -> WorkflowDefinition:
    """Parse workflow ``text`` as if it were the file ``filename`` of ``project_dir``."""
    parser = _ProjectParser(project_dir)
    definition = parser.parse_text(text, filename, (project_dir / filename).resolve())
    return parser.result(definition)


def parse_generated_tasks(config: dict[str, Any], source: str, project_dir: Path) -> TaskSpec:
    """Check tasks a running task adds (``py>``'s ``add_subtask``) as a ``^sub`` group.

    ``config`` is a group's body (``{"+subtask0": {...}, "_parallel": true}``); errors
    name ``source``. Raises :class:`InvalidWorkflow`.
    """
    parser = _ProjectParser(project_dir)
    where = _Where(source, project_dir.resolve())
    spec = parser._group("^sub", _line_map(config, source), where, GROUP_DIRECTIVES)
    try:
        parser.raise_problems()
    except InvalidWorkflow as exc:  # the lines are those of no file: leave them out
        problems = [Problem(source, None, p.message) for p in exc.problems]
        raise InvalidWorkflow(problems) from None
    return spec


def _line_map(value: Any, source: str) -> Any:
    """Plain data as the loader would give it (mappings as :class:`LineMap`)."""
    if isinstance(value, dict):
        mapping = LineMap(FileLine(1, source))
        for key, item in value.items():
            mapping[key] = _line_map(item, source)
        return mapping
    if isinstance(value, list):
        return [_line_map(item, source) for item in value]
    return value


def load_project(project_dir: Path) -> dict[str, WorkflowDefinition]:
    """Parse every ``*.dig`` at the top of ``project_dir``, keyed by workflow name.

    Raises one :class:`InvalidWorkflow` carrying the problems of all files.
    """
    parser = _ProjectParser(project_dir)
    workflows: dict[str, WorkflowDefinition] = {}
    for path in sorted(project_dir.resolve().glob("*.dig")):
        if path.is_file() and not path.name.startswith("."):
            definition = parser.parse_file(path)
            if definition is not None:
                workflows[definition.name] = definition
    parser.raise_problems()
    return workflows


@dataclass(frozen=True)
class _Where:
    """Where a task body sits: its file (as reported), that file's folder, its parent kind."""

    file: str
    directory: Path
    in_parallel: bool = False


_KINDS = ((bool, "a boolean"), (int | float, "a number"), (str, "a string"), (dict, "a mapping"))


def _describe(value: Any) -> str:
    fallback = "null" if value is None else "a list"
    return next((word for kind, word in _KINDS if isinstance(value, kind)), fallback)


def _plain(value: Any) -> Any:
    """``value`` with every :class:`LineMap` turned into a plain dict."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


class _ProjectParser:
    """Parses the files of one project, caching each file and collecting every problem."""

    def __init__(self, project_dir: Path) -> None:
        self.project_dir = project_dir.resolve()
        self.problems: list[Problem] = []
        self.parsed: dict[Path, WorkflowDefinition | None] = {}
        self.stack: list[Path] = []

    def report(self, where: _Where, line: int | None, message: str) -> None:
        # A line of an !include'd file names that file.
        file = line.file if isinstance(line, FileLine) else where.file
        self.problems.append(Problem(file, line, message))

    def raise_problems(self) -> None:
        if self.problems:
            unique = dict.fromkeys(self.problems)
            raise InvalidWorkflow(sorted(unique, key=lambda p: (p.file, p.line or 0)))

    def result(self, definition: WorkflowDefinition | None) -> WorkflowDefinition:
        self.raise_problems()
        assert definition is not None  # a file that could not be read reported a problem
        return definition

    def relative_name(self, path: Path) -> str:
        try:
            return path.relative_to(self.project_dir).as_posix()
        except ValueError:
            return path.name

    def parse_file(self, path: Path) -> WorkflowDefinition | None:
        if path in self.parsed:
            return self.parsed[path]
        name = self.relative_name(path)
        text, problem = "", None
        try:
            if too_large := file_size_problem(path):
                problem = Problem(name, None, f"the file {too_large}")
            else:
                text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            problem = Problem(name, None, f"cannot read the file: {exc}")
        if problem is not None:
            self.problems.append(problem)
            self.parsed[path] = None
            return None
        return self.parse_text(text, name, path)

    def parse_text(self, text: str, name: str, path: Path) -> WorkflowDefinition | None:
        self.stack.append(path)
        try:
            definition = self._workflow(text, _Where(name, path.parent), path)
        finally:
            self.stack.pop()
        self.parsed[path] = definition
        return definition

    def _workflow(self, text: str, where: _Where, path: Path) -> WorkflowDefinition | None:
        stem = path.stem
        if reason := workflow_name_problem(stem):
            self.problems.append(Problem(shown(where.file), None, f"{reason}: '{shown(stem)}'"))
            return None
        try:
            data = load_yaml(text, where.file, IncludeContext(self.project_dir, path))
        except InvalidWorkflow as exc:
            self.problems.extend(exc.problems)
            return None
        root_name = f"+{stem}"
        if not isinstance(data, LineMap):
            what = "empty" if data is None else f"{_describe(data)}, not a mapping of tasks"
            self.report(where, 1, f"the workflow file is {what}")
            return WorkflowDefinition(stem, TaskSpec(root_name))
        timezone = self._timezone(data, where)
        schedule = self._schedule(data, where, timezone)
        root = self._group(root_name, data, where, TOP_LEVEL_KEYS)
        return WorkflowDefinition(stem, root, timezone, schedule, self._sla(data, where))

    def _timezone(self, data: LineMap, where: _Where) -> str:
        if "timezone" not in data:
            return "UTC"
        try:
            return resolve_timezone(data["timezone"])
        except InvalidSchedule as exc:
            self.report(where, data.line_of("timezone"), exc.message)
            return "UTC"

    def _schedule(self, data: LineMap, where: _Where, timezone: str) -> dict[str, Any] | None:
        if "schedule" not in data:
            return None
        raw = data["schedule"]
        if not isinstance(raw, LineMap):
            message = f"'schedule' must be a mapping such as {{daily>: 07:00:00}}, got {raw!r}"
            self.report(where, data.line_of("schedule"), message)
            return None
        try:
            return parse_schedule(raw, timezone).to_config()
        except InvalidSchedule as exc:
            line = raw.line_of(exc.key) if exc.key else data.line_of("schedule")
            self.report(where, line, exc.message)
            return None

    def _sla(self, data: LineMap, where: _Where) -> dict[str, Any] | None:
        if "sla" not in data:
            return None
        sla = read_sla(
            data["sla"],
            data.line_of("sla"),
            lambda line, message: self.report(where, line, message),
            lambda tasks: self._group(SLA_TASK_NAME, tasks, replace(where, in_parallel=False), ()),
        )
        return None if sla is None else sla.to_config()

    def _task(self, name: str, body: LineMap, where: _Where) -> TaskSpec:
        is_operator = "_type" in body or any(str(key).endswith(">") for key in body)
        if is_operator:
            return self._disabled(self._operator_task(name, body, where), body, where)
        return self._disabled(self._group(name, body, where, GROUP_DIRECTIVES), body, where)

    def _disabled(self, task: TaskSpec, body: LineMap, where: _Where) -> TaskSpec:
        """``_disable: true``: the task (checked all the same) becomes an empty group, which
        succeeds without running anything, its children included (Digdag's compiler)."""
        if "_disable" not in body:
            return task
        disable = flag(body["_disable"])
        if disable is None:
            value = body["_disable"]
            self.report(
                where, body.line_of("_disable"), f"'_disable' must be true or false, got {value!r}"
            )
        if not disable:
            return task
        return TaskSpec(task.name, background=task.background, after=task.after)

    def _group(self, name: str, body: LineMap, where: _Where, allowed: Iterable[str]) -> TaskSpec:
        allowed = tuple(allowed)
        parallel, limit = self._parallel(body, where)
        inner = replace(where, in_parallel=parallel)
        children: list[TaskSpec] = []
        bodies: dict[str, LineMap] = {}
        for key, value in body.items():
            if not self._string_key(key, body, where):
                continue
            if key.startswith("+"):
                child = self._child(key, value, body, inner)
                if child is not None:
                    children.append(child)
                    bodies[key] = value
            elif key not in allowed:
                self._unknown_directive(key, body, where, (*allowed, *_OPERATOR_KEYS))
        self._check_after(children, bodies, where)
        common = self._directives(body, where, allowed, is_group=True)
        group = TaskSpec(
            name, parallel=parallel, parallel_limit=limit, children=tuple(children), **common
        )
        if group.env:
            group = group.with_env(group.env)
        return group if group.queue is None else group.routed_to(group.queue)

    def _child(self, key: str, value: Any, parent: LineMap, where: _Where) -> TaskSpec | None:
        line = parent.line_of(key)
        if key == "+":
            self.report(where, line, "a task needs a name after '+'")
        elif bad := _BAD_NAME_CHARACTER.search(key[1:]):
            character = bad.group()
            self.report(where, line, f"task name '{key}' cannot contain {character!r}")
        elif not isinstance(value, LineMap):
            self.report(where, line, f"task '{key}' must be a mapping, got {_describe(value)}")
        else:
            return self._task(key, value, where)
        return None

    def _string_key(self, key: Any, body: LineMap, where: _Where) -> bool:
        if not isinstance(key, str):
            self.report(where, body.line_of(key), f"key {key!r} must be a string (quote it)")
        return isinstance(key, str)

    def _unknown_directive(
        self, key: str, body: LineMap, where: _Where, candidates: Iterable[str]
    ) -> None:
        hint = suggest(key, candidates)
        if not hint and not key.startswith("_"):
            hint = " (task names start with '+')"
        self.report(where, body.line_of(key), f"unknown directive '{key}'{hint}")

    def _operator_task(self, name: str, body: LineMap, where: _Where) -> TaskSpec:
        operator, command, called = self._operator(name, body, where)
        params: dict[str, Any] = {}
        for key, value in body.items():
            if not self._string_key(key, body, where) or key.endswith(">"):
                continue
            if key.startswith("+"):
                message = f"operator task '{name}' cannot have child tasks ('{key}')"
                self.report(where, body.line_of(key), message)
            elif key.startswith("_"):
                allowed = CONTROL_DIRECTIVES if operator in CONTROL_OPERATORS else ()
                if key not in OPERATOR_DIRECTIVES and key not in allowed:
                    self._unknown_directive(key, body, where, (*OPERATOR_DIRECTIVES, *allowed))
            else:
                secrets_allowed = key in SECRET_PARAMS.get(str(operator), ())
                self._check_values(value, body.line_of(key), where, secrets_allowed)
                params[key] = _plain(value)
        common = self._directives(body, where, OPERATOR_DIRECTIVES, is_group=False)
        if operator in CONTROL_OPERATORS:
            common.update(self._control(operator, name, body, where))
        return TaskSpec(
            name, operator=operator, command=command, params=params, called=called, **common
        )

    def _control(self, operator: str, name: str, body: LineMap, where: _Where) -> dict[str, Any]:
        """``_do``, ``_else_do`` and ``_parallel`` of a control operator (loop>, if>, …)."""
        fields: dict[str, Any] = {}
        plain = replace(where, in_parallel=False)
        if "_do" in body:
            fields["do"] = self._body("+do", "_do", body, plain)
        if "_else_do" in body and operator != "if":
            self.report(where, body.line_of("_else_do"), "'_else_do' is only valid on 'if>'")
        elif "_else_do" in body:
            fields["else_do"] = self._body("+else_do", "_else_do", body, plain)
        if "_do" not in body and "_else_do" not in body:
            needs = "'_do' or '_else_do'" if operator == "if" else "'_do'"
            self.report(
                where, body.line_of(f"{operator}>"), f"'{operator}>' in '{name}' needs {needs}"
            )
        if "_parallel" in body:
            if operator == "if":
                self.report(where, body.line_of("_parallel"), "'_parallel' is not valid on 'if>'")
            elif isinstance(body["_parallel"], str) and "${" in body["_parallel"]:
                self._check_values(body["_parallel"], body.line_of("_parallel"), where)
                fields["parallel_expr"] = body["_parallel"]
            else:
                fields["parallel"], fields["parallel_limit"] = self._parallel(body, where)
        return fields

    def _operator(
        self, name: str, body: LineMap, where: _Where
    ) -> tuple[str, Any, TaskSpec | None]:
        """The operator, its command, and for ``call>`` the root of the called workflow."""
        keys = [key for key in body if isinstance(key, str) and key.endswith(">")]
        keys += ["_type"] if "_type" in body else []
        for extra in keys[1:]:
            message = f"task '{name}' has two operators: '{keys[0]}' and '{extra}'"
            self.report(where, body.line_of(extra), message)
        if "_command" in body and keys[0] != "_type":
            self.report(where, body.line_of("_command"), "'_command' is only valid with '_type'")
        if keys[0] == "_type":
            operator, command_key = body["_type"], "_command"
            shown = f"'_type: {operator}'"
        else:
            operator, command_key = keys[0][:-1], keys[0]
            shown = f"'{keys[0]}'"
        if operator not in OPERATORS:
            candidates = OPERATORS if keys[0] == "_type" else _OPERATOR_KEYS
            hint = suggest(str(operator if keys[0] == "_type" else keys[0]), candidates)
            self.report(where, body.line_of(keys[0]), f"unknown operator {shown}{hint}")
            return str(operator), body.get(command_key), None
        line = body.line_of(command_key if command_key in body else keys[0])
        if operator == "call":
            return operator, *self._call(body.get(command_key), line, where)
        return operator, self._command(operator, body.get(command_key), line, where), None

    def _command(self, operator: str, command: Any, line: int, where: _Where) -> Any:
        if operator == "nop":
            return None  # `nop>:` takes no command; whatever follows is ignored, as in Digdag
        if operator == "wait" and not (isinstance(command, str) and "${" in command):
            try:
                parse_duration(command, maximum=MAX_WAIT_SECONDS)
            except BadDuration as exc:
                self.report(where, line, f"'wait>' {exc}")
            return command
        if operator in CONTROL_OPERATORS:
            # A count, a mapping or a boolean, or ${...} giving one: checked once rendered.
            if isinstance(command, LineMap):
                self._check_values(command, line, where)
                return _plain(command)
            if isinstance(command, str):
                self._check_values(command, line, where)
            return command
        if operator == "py":
            if not isinstance(command, str) or not PY_TARGET.fullmatch(command):
                self.report(where, line, f"'py>' needs module.function, got {command!r}")
            return command
        if isinstance(command, int | float) and not isinstance(command, bool):
            command = str(command)
        if not isinstance(command, str):
            message = f"'{operator}>' needs a string, got {_describe(command)}"
            self.report(where, line, message)
            return command
        self._check_values(command, line, where, secrets_allowed=operator == "sh")
        return command

    def _call(self, target: Any, line: int, where: _Where) -> tuple[Any, TaskSpec | None]:
        if not isinstance(target, str) or not target.strip():
            self.report(where, line, f"'call>' needs a workflow file name, got {target!r}")
            return target, None
        if "${" in target:
            message = f"'call>' needs a literal file name, not an expression: '{target}'"
            self.report(where, line, message)
            return target, None
        file_name = target if target.endswith(".dig") else f"{target}.dig"
        path = (where.directory / file_name).resolve()
        if not path.is_relative_to(self.project_dir):
            self.report(where, line, f"'call>' target '{target}' is outside the project")
        elif path in self.stack:
            chain = [self.relative_name(p) for p in self.stack[self.stack.index(path) :]]
            self.report(where, line, f"call cycle: {' -> '.join([*chain, chain[0]])}")
        elif not path.is_file():
            shown = self.relative_name(path)
            self.report(where, line, f"'call>' target '{target}' does not exist ({shown})")
        else:
            definition = self.parse_file(path)
            called = None if definition is None else replace(definition.root, name="^sub")
            return self.relative_name(path), called
        return target, None

    def _directives(
        self, body: LineMap, where: _Where, allowed: tuple[str, ...], is_group: bool
    ) -> dict[str, Any]:
        """TaskSpec fields from the directives every kind of task may carry."""
        common: dict[str, Any] = {}
        plain = replace(where, in_parallel=False)
        if "_export" in body:
            common["export"] = self._export(body, where)
        if "_retry" in body:
            common["retry"] = self._retry(body["_retry"], body.line_of("_retry"), where)
        if any(key in body for key in DELAY_DIRECTIVES):
            common["start"] = self._start(body, where)
        if "_error" in body:
            common["error"] = self._body("^error", "_error", body, plain)
        if "_check" in body and is_group:
            message = "'_check' is only valid on an operator task"
            self.report(where, body.line_of("_check"), message)
        elif "_check" in body:
            common["check"] = self._body("^check", "_check", body, plain)
        if "_background" in body and "_background" in allowed:
            common["background"] = self._background(body, where)
        if "_after" in body and "_after" in allowed:
            common["after"] = self._after(body, where)
        if "_queue" in body and "_queue" in allowed:
            common["queue"] = self._queue(body, where)
        if "_timeout" in body and "_timeout" in allowed:
            common["timeout_seconds"] = self._timeout(body, where)
        if "_env" in body:
            common["env"] = self._env(body, where)
        return common

    def _env(self, body: LineMap, where: _Where) -> dict[str, Any]:
        value = body["_env"]
        if not isinstance(value, LineMap):
            message = (
                f"'_env' must be a mapping of variable names to values, got {_describe(value)}"
            )
            self.report(where, body.line_of("_env"), message)
            return {}
        env: dict[str, Any] = {}
        for key, item in value.items():
            line = value.line_of(key)
            if not isinstance(key, str) or not ENV_NAME.fullmatch(key):
                self.report(where, line, f"'_env' name {key!r} is not a variable name")
            elif key.startswith("TICKWORK_"):
                self.report(where, line, f"'_env' name {key!r}: TICKWORK_ names are tickwork's")
            elif isinstance(item, LineMap | list) or item is None:
                self.report(where, line, f"'_env' {key} must be a string or number")
            else:
                self._check_values(item, line, where, secrets_allowed=True)
                env[key] = item
        return env

    def _timeout(self, body: LineMap, where: _Where) -> int | None:
        value = body["_timeout"]
        line = body.line_of("_timeout")
        if isinstance(value, str) and "${" in value:
            self.report(where, line, "'_timeout' cannot use ${...} expressions")
            return None
        try:
            return parse_duration(value, minimum=1, maximum=MAX_TIMEOUT_SECONDS)
        except BadDuration as exc:
            self.report(where, line, f"'_timeout' {exc}")
        return None

    def _queue(self, body: LineMap, where: _Where) -> str | None:
        value = body["_queue"]
        line = body.line_of("_queue")
        if isinstance(value, str) and "${" in value:
            self.report(where, line, "'_queue' cannot use ${...} expressions")
        elif not isinstance(value, str) or not QUEUE_NAME.fullmatch(value):
            message = (
                "'_queue' must be a queue name (a letter or digit, then letters, digits, "
                f"'_', '.' or '-'; up to 64), got {value!r}"
            )
            self.report(where, line, message)
        else:
            return value
        return None

    def _body(self, name: str, key: str, body: LineMap, where: _Where) -> TaskSpec | None:
        value = body[key]
        if isinstance(value, LineMap):
            return self._task(name, value, where)
        message = f"'{key}' must be a mapping (a task or a group of tasks), got {_describe(value)}"
        self.report(where, body.line_of(key), message)
        return None

    def _export(self, body: LineMap, where: _Where) -> dict[str, Any]:
        value = body["_export"]
        if value is None:
            return {}
        if not isinstance(value, LineMap):
            message = f"'_export' must be a mapping, got {_describe(value)}"
            self.report(where, body.line_of("_export"), message)
            return {}
        self._check_values(value, value.line, where)
        return {str(key): item for key, item in _plain(value).items()}

    def _check_values(
        self, value: Any, line: int, where: _Where, secrets_allowed: bool = False
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
                self._check_values(item, value.line_of(key), where, secrets_allowed)
        elif isinstance(value, list):
            for item in value:
                self._check_values(item, line, where, secrets_allowed)
        elif value is not None and not isinstance(value, bool | int | float):
            self.report(where, line, f"unsupported YAML value {value!r}")

    def _check_secrets(self, text: str, line: int, where: _Where, allowed: bool) -> None:
        for name in sorted(secret_references(text)):
            if not allowed:
                self.report(where, line, f"'${{secret:{name}}}': {WHERE_ALLOWED}")
            elif not SECRET_NAME.fullmatch(name):
                self.report(where, line, f"'${{secret:{name}}}': {name!r} is not a secret name")

    def _parallel(self, body: LineMap, where: _Where) -> tuple[bool, int | None]:
        try:
            return parallel_value(body.get("_parallel", False), body.line_of("_parallel"))
        except Bad as bad:
            self.report(where, bad.line, bad.message)
        return False, None

    def _background(self, body: LineMap, where: _Where) -> bool:
        value = body["_background"]
        background = flag(value)
        line = body.line_of("_background")
        if background is None:
            self.report(where, line, f"'_background' must be true or false, got {value!r}")
        elif background and where.in_parallel:
            self.report(where, line, "'_background' is not valid inside a _parallel group")
        return bool(background) and not where.in_parallel

    def _after(self, body: LineMap, where: _Where) -> tuple[str, ...]:
        value = body["_after"]
        line = body.line_of("_after")
        names = [value] if isinstance(value, str) else value
        if not where.in_parallel:
            self.report(where, line, "'_after' is only valid inside a _parallel group")
        elif not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            message = f"'_after' must be a task name or a list of task names, got {value!r}"
            self.report(where, line, message)
        else:
            return tuple(dict.fromkeys(n if n.startswith("+") else f"+{n}" for n in names))
        return ()

    def _check_after(
        self, children: list[TaskSpec], bodies: dict[str, LineMap], where: _Where
    ) -> None:
        siblings = [child.name for child in children]
        graph: dict[str, list[str]] = {}
        for child in children:
            line = bodies[child.name].line_of("_after")
            graph[child.name] = []
            for upstream in child.after:
                if upstream == child.name:
                    self.report(where, line, f"task '{child.name}' cannot run after itself")
                elif upstream not in siblings:
                    hint = suggest(upstream, siblings)
                    message = f"'_after' names '{upstream}', not a sibling of '{child.name}'"
                    self.report(where, line, f"{message}{hint}")
                else:
                    graph[child.name].append(upstream)
        cycle = find_cycle(graph)
        if cycle:
            line = bodies[cycle[0]].line_of("_after")
            self.report(where, line, f"'_after' cycle: {' -> '.join([*cycle, cycle[0]])}")

    def _start(self, body: LineMap, where: _Where) -> StartRule | None:
        """``_delay`` and ``_start_at``; None when neither holds the task back."""
        delay, at = 0, None
        try:
            if "_delay" in body:
                delay = delay_seconds(body["_delay"], body.line_of("_delay"))
        except Bad as bad:
            self.report(where, bad.line, bad.message)
        try:
            if "_start_at" in body:
                at = start_at(body["_start_at"], body.line_of("_start_at"))
        except Bad as bad:
            self.report(where, bad.line, bad.message)
        return StartRule(delay, at) if delay or at is not None else None

    def _retry(self, value: Any, line: int, where: _Where) -> RetryPolicy | None:
        try:
            return retry_policy(value, line)
        except Bad as bad:
            self.report(where, bad.line, bad.message)
        return None
