"""Turn ``*.dig`` workflow files into :class:`WorkflowDefinition` trees, with file:line errors.

Parsing never stops at the first mistake: every problem of every file (including files
reached through ``call>``) is collected and raised as one :class:`InvalidWorkflow`, sorted
by file and line. Sections and directives are read by :mod:`tickwork.shared.dsl.schedule_section`
and :mod:`tickwork.shared.dsl.task_directives`; operator options are checked against the operator
registry by :mod:`tickwork.shared.dsl.operator_options`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from tickwork.shared.domain.operators import (
    UNSUPPORTED,
    CommandKind,
    find_operator,
    operator_names,
)
from tickwork.shared.domain.schedule import suggest
from tickwork.shared.domain.sla import SLA_TASK_NAME
from tickwork.shared.domain.workflow import TaskSpec, WorkflowDefinition
from tickwork.shared.dsl.directives import flag
from tickwork.shared.dsl.loader import IncludeContext, LineMap, file_size_problem, load_yaml
from tickwork.shared.dsl.names import shown, workflow_name_problem
from tickwork.shared.dsl.operator_options import (
    OPERATOR_KEYS,
    PY_TARGET,
    check_command,
    check_options,
    extra_directives,
    param_takes_secrets,
    read_control,
)
from tickwork.shared.dsl.reporting import Reporter, Where, describe, line_map, plain
from tickwork.shared.dsl.schedule_section import read_schedule, read_timezone
from tickwork.shared.dsl.sla import read_sla
from tickwork.shared.dsl.task_directives import (
    DELAY_DIRECTIVES,
    ENV_NAME,
    GROUP_DIRECTIVES,
    OPERATOR_DIRECTIVES,
    TOP_LEVEL_KEYS,
    WORKFLOW_KEYS_IN_GROUPS,
    check_after,
    read_after,
    read_background,
    read_env,
    read_export,
    read_parallel,
    read_pool,
    read_priority,
    read_queue,
    read_retry,
    read_start,
    read_timeout,
)
from tickwork.shared.dsl.trigger_section import read_trigger
from tickwork.shared.errors import InvalidWorkflow, Problem

__all__ = [
    "ENV_NAME",
    "PY_TARGET",
    "load_project",
    "parse_called_file",
    "parse_generated_tasks",
    "parse_workflow_file",
    "parse_workflow_text",
]

# '+' and '^' join the parts of a full name (+wf+group^error); the rest cannot be shown.
_BAD_NAME_CHARACTER = re.compile(r"[+^\x00-\x1f\x7f]")


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
    where = Where(source, project_dir.resolve())
    spec = parser._group("^sub", line_map(config, source), where, GROUP_DIRECTIVES)
    try:
        parser.raise_problems()
    except InvalidWorkflow as exc:  # the lines are those of no file: leave them out
        problems = [Problem(source, None, p.message) for p in exc.problems]
        raise InvalidWorkflow(problems) from None
    return spec


def parse_called_file(path: Path, project_dir: Path) -> TaskSpec:
    """The workflow in ``path`` as a ``call>`` task runs it: its root as a ``^sub`` group
    whose tasks run in the file's folder. Raises :class:`InvalidWorkflow`."""
    parser = _ProjectParser(project_dir)
    path = path.resolve()
    parser.parse_file(path)
    parser.raise_problems()
    called = parser.called_root(path)
    assert called is not None  # a file that could not be read reported a problem
    return called


def load_project(project_dir: Path) -> dict[str, WorkflowDefinition]:
    """Parse every ``*.dig`` at the top of ``project_dir``, keyed by workflow name.

    Raises one :class:`InvalidWorkflow` carrying the problems of all files.
    """
    parser = _ProjectParser(project_dir)
    workflows: dict[str, WorkflowDefinition] = {}
    for path in sorted(project_dir.resolve().glob("*.dig")):
        if path.is_file() and not path.name.startswith("."):
            before = len(parser.warnings)
            definition = parser.parse_file(path)
            if definition is not None:
                found = tuple(dict.fromkeys(parser.warnings[before:]))
                workflows[definition.name] = replace(definition, warnings=found)
    parser.raise_problems()
    return workflows


PLAIN_DIRECTIVES: dict[str, tuple[str, Callable[[Reporter, LineMap, Where], Any]]] = {
    "_background": ("background", read_background),
    "_after": ("after", read_after),
    "_queue": ("queue", read_queue),
    "_pool": ("pool", read_pool),
    "_priority": ("priority", read_priority),
    "_timeout": ("timeout_seconds", read_timeout),
}
"""Directives read by one reader each into one TaskSpec field, where the task's kind
allows them: the key, the field and the reader."""


class _ProjectParser(Reporter):
    """Parses the files of one project, caching each file and collecting every problem."""

    def __init__(self, project_dir: Path) -> None:
        super().__init__()
        self.project_dir = project_dir.resolve()
        self.parsed: dict[Path, WorkflowDefinition | None] = {}
        self.stack: list[Path] = []

    def result(self, definition: WorkflowDefinition | None) -> WorkflowDefinition:
        self.raise_problems()
        assert definition is not None  # a file that could not be read reported a problem
        if self.warnings:
            unique = dict.fromkeys(self.warnings)
            ordered = sorted(unique, key=lambda p: (p.file, p.line or 0))
            definition = replace(definition, warnings=tuple(ordered))
        return definition

    def relative_name(self, path: Path) -> str:
        try:
            return path.relative_to(self.project_dir).as_posix()
        except ValueError:
            return path.name

    def working_dir(self, directory: Path) -> str:
        """``_workdir``'s value for a folder of the project: its path from the project's
        root (empty for the root itself)."""
        relative = directory.relative_to(self.project_dir).as_posix()
        return "" if relative == "." else relative

    def called_root(self, path: Path) -> TaskSpec | None:
        """The root of the parsed file ``path`` as a ``call>`` embeds it: a ``^sub`` group
        working in the file's folder unless its own ``_workdir`` says otherwise."""
        definition = self.parsed.get(path)
        if definition is None:
            return None
        root = definition.root
        export = {"_workdir": self.working_dir(path.parent), **root.export}
        return replace(root, name="^sub", export=export)

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
            definition = self._workflow(text, Where(name, path.parent), path)
        finally:
            self.stack.pop()
        self.parsed[path] = definition
        return definition

    def _workflow(self, text: str, where: Where, path: Path) -> WorkflowDefinition | None:
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
            what = "empty" if data is None else f"{describe(data)}, not a mapping of tasks"
            self.report(where, 1, f"the workflow file is {what}")
            return WorkflowDefinition(stem, TaskSpec(root_name))
        timezone = read_timezone(self, data, where)
        schedule = read_schedule(self, data, where, timezone)
        root = self._group(root_name, data, where, TOP_LEVEL_KEYS)
        trigger = read_trigger(self, data, where)
        return WorkflowDefinition(
            stem, root, timezone, schedule, self._sla(data, where), trigger=trigger
        )

    def _sla(self, data: LineMap, where: Where) -> dict[str, Any] | None:
        if "sla" not in data:
            return None
        sla = read_sla(
            data["sla"],
            data.line_of("sla"),
            lambda line, message: self.report(where, line, message),
            lambda tasks: self._group(SLA_TASK_NAME, tasks, replace(where, in_parallel=False), ()),
        )
        return None if sla is None else sla.to_config()

    def _task(self, name: str, body: LineMap, where: Where) -> TaskSpec:
        is_operator = "_type" in body or any(str(key).endswith(">") for key in body)
        if is_operator:
            return self._disabled(self._operator_task(name, body, where), body, where)
        group = self._group(name, body, where, (*GROUP_DIRECTIVES, *WORKFLOW_KEYS_IN_GROUPS))
        if any(key in body for key in WORKFLOW_KEYS_IN_GROUPS):
            self._check_workflow_keys(body, where)
        return self._disabled(group, body, where)

    def _check_workflow_keys(self, body: LineMap, where: Where) -> None:
        """A group's ``timezone``, ``schedule`` and ``sla`` (an included workflow file's):
        checked as a workflow's are, then left out, as Digdag does."""
        timezone = read_timezone(self, body, where)
        read_schedule(self, body, where, timezone)
        self._sla(body, where)

    def _disabled(self, task: TaskSpec, body: LineMap, where: Where) -> TaskSpec:
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

    def _group(self, name: str, body: LineMap, where: Where, allowed: Iterable[str]) -> TaskSpec:
        allowed = tuple(allowed)
        where, workdir = self._workdir(body, where)
        parallel, limit = read_parallel(self, body, where)
        inner = replace(where, in_parallel=parallel)
        children: list[TaskSpec] = []
        bodies: dict[str, LineMap] = {}
        for key, value in body.items():
            if not self.string_key(key, body, where):
                continue
            if key.startswith("+"):
                child = self._child(key, value, body, inner)
                if child is not None:
                    children.append(child)
                    bodies[key] = value
            elif key not in allowed:
                self.unknown_directive(key, body, where, (*allowed, *OPERATOR_KEYS))
        check_after(self, children, bodies, where)
        common = self._directives(body, where, allowed, is_group=True)
        if workdir:
            common["export"] = {**common.get("export", {}), **workdir}
        group = TaskSpec(
            name, parallel=parallel, parallel_limit=limit, children=tuple(children), **common
        )
        if group.env:
            group = group.with_env(group.env)
        inherited = group.inherited()
        return group.inheriting(**inherited) if inherited else group

    def _child(self, key: str, value: Any, parent: LineMap, where: Where) -> TaskSpec | None:
        line = parent.line_of(key)
        if key == "+":
            self.report(where, line, "a task needs a name after '+'")
        elif bad := _BAD_NAME_CHARACTER.search(key[1:]):
            character = bad.group()
            self.report(where, line, f"task name '{key}' cannot contain {character!r}")
        elif not isinstance(value, LineMap):
            self.report(where, line, f"task '{key}' must be a mapping, got {describe(value)}")
        else:
            return self._task(key, value, where)
        return None

    def _operator_task(self, name: str, body: LineMap, where: Where) -> TaskSpec:
        where, workdir = self._workdir(body, where)
        operator, command, called = self._operator(name, body, where)
        spec = find_operator(operator)
        extra = extra_directives(spec)
        params: dict[str, Any] = {}
        for key, value in body.items():
            if not self.string_key(key, body, where) or key.endswith(">"):
                continue
            if key.startswith("+"):
                message = f"operator task '{name}' cannot have child tasks ('{key}')"
                self.report(where, body.line_of(key), message)
            elif key.startswith("_"):
                if key not in OPERATOR_DIRECTIVES and key not in extra:
                    self.unknown_directive(key, body, where, (*OPERATOR_DIRECTIVES, *extra))
            else:
                secrets_allowed = param_takes_secrets(spec, key)
                self.check_values(value, body.line_of(key), where, secrets_allowed)
                params[key] = plain(value)
        check_options(self, spec, name, body, where)
        common = self._directives(body, where, OPERATOR_DIRECTIVES, is_group=False)
        if workdir:
            common["export"] = {**common.get("export", {}), **workdir}
        if spec is not None and spec.control is not None:
            control = read_control(self, spec, spec.control, name, body, where, self._body)
            common.update(control)
        task = TaskSpec(
            name, operator=operator, command=command, params=params, called=called, **common
        )
        # A loop's or if>'s _pool, _priority and _queue pass to what it generates.
        inherited = task.inherited()
        return task.inheriting(**inherited) if inherited and (task.do or task.else_do) else task

    def _operator(self, name: str, body: LineMap, where: Where) -> tuple[str, Any, TaskSpec | None]:
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
            written = f"'_type: {operator}'"
        else:
            operator, command_key = keys[0][:-1], keys[0]
            written = f"'{keys[0]}'"
        spec = find_operator(operator)
        if spec is None:
            reason = UNSUPPORTED.get(operator) if isinstance(operator, str) else None
            if reason is not None:
                message = f"Digdag's operator '{operator}>' is not supported: {reason}"
                self.report(where, body.line_of(keys[0]), message)
                return str(operator), body.get(command_key), None
            candidates = operator_names() if keys[0] == "_type" else OPERATOR_KEYS
            hint = suggest(str(operator if keys[0] == "_type" else keys[0]), candidates)
            self.report(where, body.line_of(keys[0]), f"unknown operator {written}{hint}")
            return str(operator), body.get(command_key), None
        line = body.line_of(command_key if command_key in body else keys[0])
        if spec.name == "call":
            return spec.name, *self._call(body.get(command_key), line, where)
        command = body.get(command_key)
        if spec.command is CommandKind.TEXT_OR_DATA and command is None and "body" in body:
            return spec.name, None, None  # the text is the `body:` param (Digdag's alias)
        return spec.name, check_command(self, spec, command, line, where), None

    def _call(self, target: Any, line: int, where: Where) -> tuple[Any, TaskSpec | None]:
        if not isinstance(target, str) or not target.strip():
            self.report(where, line, f"'call>' needs a workflow file name, got {target!r}")
            return target, None
        if "${" in target:  # resolved when the task runs, from its params
            return target, None
        file_name = target if target.endswith(".dig") else f"{target}.dig"
        path = (where.directory / file_name).resolve()
        if not path.is_relative_to(self.project_dir):
            self.report(where, line, f"'call>' target '{target}' is outside the project")
        elif path in self.stack:
            chain = [self.relative_name(p) for p in self.stack[self.stack.index(path) :]]
            self.report(where, line, f"call cycle: {' -> '.join([*chain, chain[0]])}")
        elif not path.is_file():
            name = self.relative_name(path)
            self.report(where, line, f"'call>' target '{target}' does not exist ({name})")
        else:
            self.parse_file(path)
            return self.relative_name(path), self.called_root(path)
        return target, None

    def _workdir(self, body: LineMap, where: Where) -> tuple[Where, dict[str, Any]]:
        """``_workdir``: the folder (from the file's, or the enclosing ``_workdir``) the
        task's commands run in and its ``call>`` targets are found from. The place the
        body is read from, and the export that carries the folder to the tasks."""
        if "_workdir" not in body:
            return where, {}
        value, line = body["_workdir"], body.line_of("_workdir")
        if not isinstance(value, str) or not value.strip() or "${" in value:
            self.report(where, line, f"'_workdir' needs a folder name, got {value!r}")
            return where, {}
        directory = (where.directory / value).resolve()
        if not directory.is_relative_to(self.project_dir):
            self.report(where, line, f"'_workdir' '{value}' is outside the project")
            return where, {}
        return replace(where, directory=directory), {"_workdir": self.working_dir(directory)}

    def _directives(
        self, body: LineMap, where: Where, allowed: tuple[str, ...], is_group: bool
    ) -> dict[str, Any]:
        """TaskSpec fields from the directives every kind of task may carry."""
        common: dict[str, Any] = {}
        outside = replace(where, in_parallel=False)
        if "_export" in body:
            common["export"] = read_export(self, body, where)
        if "_retry" in body:
            common["retry"] = read_retry(self, body, where)
        if any(key in body for key in DELAY_DIRECTIVES):
            common["start"] = read_start(self, body, where)
        if "_error" in body:
            common["error"] = self._body("^error", "_error", body, outside)
        if "_check" in body and is_group:
            message = "'_check' is only valid on an operator task"
            self.report(where, body.line_of("_check"), message)
        elif "_check" in body:
            common["check"] = self._body("^check", "_check", body, outside)
        for key, (field_name, read) in PLAIN_DIRECTIVES.items():
            if key in body and key in allowed:
                common[field_name] = read(self, body, where)
        if "_env" in body:
            common["env"] = read_env(self, body, where)
        return common

    def _body(self, name: str, key: str, body: LineMap, where: Where) -> TaskSpec | None:
        value = body[key]
        if isinstance(value, LineMap):
            return self._task(name, value, where)
        message = f"'{key}' must be a mapping (a task or a group of tasks), got {describe(value)}"
        self.report(where, body.line_of(key), message)
        return None
