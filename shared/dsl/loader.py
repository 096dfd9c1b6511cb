"""Load workflow YAML safely, keeping the line of every mapping and key for error messages.

The loader is PyYAML's ``SafeLoader`` with three changes that suit workflow files:
mappings become :class:`LineMap`; a key repeated in one mapping is an error rather than a
silent override; and ``10:00:00`` stays a string instead of YAML 1.1's base-60 integer,
as do dates, so ``daily>: 10:00:00`` and ``start: 2024-01-01`` mean what they say.

``!include`` splices another YAML file of the project: as a key (``!include : 'a.dig'``,
its mapping merged into the enclosing one) or as a value (``+t: !include 'task.dig'``).
Paths are relative to the including file and must stay inside the project; every line
number keeps the name of the file it came from (:class:`FileLine`).

PyYAML documents adding constructors and implicit resolvers, and ``construct_scalar``,
``check_event`` and ``peek_event``, but nothing to drop a resolver, to see each node as it
is composed, or to build one object of a mapping. So this module, the only one importing
PyYAML, relies on undocumented names of its ``SafeLoader``: ``compose_node(parent,
index)`` (replaced, to bound nodes and alias expansion as they are composed), the
``yaml_implicit_resolvers`` table (first character -> ``(tag, regexp)`` pairs, filtered),
``flatten_mapping``, ``construct_object``, ``construct_yaml_int`` and
``construct_yaml_float``. Checked against PyYAML 6.0.4 (pinned in constraints.txt);
tests/test_library_internals.py fails, naming this module, if those names change shape.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from tickwork.shared.domain.storable import MAX_INTEGER, text_problem
from tickwork.shared.errors import InvalidWorkflow, Problem

CHECKED_PYYAML_VERSIONS = ("6.0.4",)
"""The PyYAML versions the loader below was read against."""

_MAP_TAG = "tag:yaml.org,2002:map"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"
_STR_TAG = "tag:yaml.org,2002:str"

_INT = re.compile(
    r"""\A(?:[-+]?0b[0-1_]+
    |[-+]?0[0-7_]+
    |[-+]?(?:0|[1-9][0-9_]*)
    |[-+]?0x[0-9a-fA-F_]+)\Z""",
    re.X,
)
_FLOAT = re.compile(
    r"""\A(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?
    |\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))\Z""",
    re.X,
)


_INCLUDE_TAG = "!include"
MAX_INCLUDES = 100
"""Files one workflow file may include, directly or not."""
MAX_FILE_BYTES = 1024 * 1024
"""Largest workflow file, and largest included file, in bytes: refused before it is read."""
MAX_FILE_NODES = 100_000
"""Most YAML values (mappings, lists, scalars, keys included) one file may hold: past it
the file is refused as it is read, so parsing any file is bounded in time and memory."""


def file_size_problem(path: Path) -> str | None:
    """Why the file at ``path`` is too large to parse (found before reading it), or None.

    Raises ``OSError`` when the file cannot be looked at.
    """
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        return f"is {size} bytes, over the limit of {MAX_FILE_BYTES} for a workflow file"
    return None


class FileLine(int):
    """A 1-based line number that knows its file (a line of an ``!include``d file)."""

    file: str

    def __new__(cls, line: int, file: str) -> FileLine:
        value = super().__new__(cls, line)
        value.file = file
        return value


@dataclass
class IncludeContext:
    """Where ``!include`` looks: the project, the files being included, how many so far."""

    project_dir: Path
    path: Path  # the file being loaded
    stack: tuple[Path, ...] = ()
    count: list[int] = field(default_factory=lambda: [0])
    # Nodes that aliases repeat, over the including file and every file it includes.
    expanded_nodes: list[int] = field(default_factory=lambda: [0])


@dataclass(frozen=True)
class _IncludeKey:
    """An ``!include`` used as a key; its value names the file to merge."""

    line: int
    column: int


class LineMap(dict[Any, Any]):
    """A YAML mapping that remembers where it was: ``line`` and each key's ``key_lines``."""

    def __init__(self, line: int = 1) -> None:
        super().__init__()
        self.line = line
        self.key_lines: dict[str, int] = {}

    def line_of(self, key: Any) -> int:
        """The 1-based line of ``key``, or of the mapping itself if the key is not here."""
        return self.key_lines.get(str(key), self.line)


class _WorkflowLoader(yaml.SafeLoader):
    """SafeLoader building :class:`LineMap` mappings and collecting duplicate keys."""

    def __init__(self, text: str, filename: str, include: IncludeContext | None = None) -> None:
        super().__init__(text)
        self.filename = filename
        self.include = include
        self.problems: list[Problem] = []
        # Nodes that aliases repeat, counted once per use (shared with included files).
        self.expanded_nodes = [0] if include is None else include.expanded_nodes
        self.node_sizes: dict[int, int] = {}
        self.composed_nodes = 0
        self.include_nodes: dict[int, bool] = {}

    def check_duplicates(self, node: yaml.MappingNode) -> None:
        first_lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag in (_MERGE_TAG, _INCLUDE_TAG) or not isinstance(
                key_node, yaml.ScalarNode
            ):
                continue
            key = self.construct_object(key_node)
            line = key_node.start_mark.line + 1
            if key in first_lines:
                message = f"duplicate key '{key}' (first at line {first_lines[key]})"
                self.problems.append(Problem(self.filename, line, message))
            else:
                first_lines[key] = line

    def fill_line_map(self, data: LineMap, node: yaml.MappingNode) -> None:
        self.check_duplicates(node)
        self.flatten_mapping(node)
        for key_node, value_node in node.value:
            key = self.construct_object(key_node)
            try:
                hash(key)
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    None, None, "found an unhashable key", key_node.start_mark
                ) from None
            if isinstance(key, _IncludeKey):
                self.merge_included(data, self.construct_object(value_node), key.line)
                continue
            data[key] = self.construct_object(value_node)
            data.key_lines[str(key)] = self.file_line(key_node.start_mark.line + 1)

    def file_line(self, number: int) -> FileLine:
        return FileLine(number, self.filename)

    def merge_included(self, data: LineMap, target: Any, line: int) -> None:
        included = self.load_included(target, line)
        if included is None:
            return
        if not isinstance(included, LineMap):
            message = f"'!include' as a key needs a file holding a mapping: {target!r}"
            self.problems.append(Problem(self.filename, line, message))
            return
        for key, value in included.items():
            if key in data:
                message = (
                    f"'!include {target}' defines '{key}' again (first at line {data.line_of(key)})"
                )
                self.problems.append(Problem(self.filename, line, message))
                continue
            data[key] = value
            data.key_lines[str(key)] = included.key_lines.get(str(key), included.line)

    def load_included(self, target: Any, line: int) -> Any:
        """The data of the file ``!include`` names; None (a problem noted) if it cannot be."""
        problem = self._include_problem(target)
        if problem is not None:
            self.problems.append(Problem(self.filename, line, problem))
            return None
        assert self.include is not None
        path = (self.include.path.parent / str(target)).resolve()
        name = self._relative(path)
        try:
            if too_large := file_size_problem(path):
                self.problems.append(
                    Problem(self.filename, line, f"'!include' file {name} {too_large}")
                )
                return None
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = (
                "does not exist" if isinstance(exc, FileNotFoundError) else f"cannot be read: {exc}"
            )
            self.problems.append(Problem(self.filename, line, f"'!include' file {name} {reason}"))
            return None
        self.include.count[0] += 1
        context = IncludeContext(
            self.include.project_dir,
            path,
            (*self.include.stack, self.include.path),
            self.include.count,
            self.include.expanded_nodes,
        )
        try:
            return load_yaml(text, name, context)
        except InvalidWorkflow as exc:
            self.problems.extend(exc.problems)
            return None

    def _include_problem(self, target: Any) -> str | None:
        if self.include is None:
            return "'!include' works only in a workflow file of a project"
        if not isinstance(target, str) or not target.strip():
            return f"'!include' needs a file name, got {target!r}"
        if PurePosixPath(target).is_absolute() or Path(target).is_absolute():
            return f"'!include' needs a path relative to this file, not an absolute one: {target!r}"
        path = (self.include.path.parent / target).resolve()
        if not path.is_relative_to(self.include.project_dir.resolve()):
            return f"'!include' file {target!r} is outside the project"
        chain = [*self.include.stack, self.include.path]
        if path in chain:
            names = [self._relative(p) for p in chain[chain.index(path) :]]
            return f"'!include' cycle: {' -> '.join([*names, names[0]])}"
        if self.include.count[0] >= MAX_INCLUDES:
            return f"more than {MAX_INCLUDES} '!include' files"
        return None

    def _relative(self, path: Path) -> str:
        assert self.include is not None
        try:
            return path.relative_to(self.include.project_dir.resolve()).as_posix()
        except ValueError:
            return path.name


def _construct_line_map(loader: _WorkflowLoader, node: yaml.MappingNode) -> Iterator[LineMap]:
    data = LineMap(loader.file_line(node.start_mark.line + 1))
    yield data
    loader.fill_line_map(data, node)


def _without_sexagesimal_numbers_and_dates() -> dict[Any, list[tuple[str, re.Pattern[str]]]]:
    dropped = (_INT_TAG, _FLOAT_TAG, _TIMESTAMP_TAG)
    return {
        first: [(tag, regexp) for tag, regexp in resolvers if tag not in dropped]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }


MAX_EXPANDED_NODES = 200_000
"""Aliases may repeat a node many times ("billion laughs"); past this many nodes once
expanded, a file is refused rather than exhausting memory."""


def _compose_counting_aliases(loader: _WorkflowLoader, parent: Any, index: Any) -> Any:
    is_alias = loader.check_event(yaml.AliasEvent)
    mark = loader.peek_event().start_mark  # type: ignore[no-untyped-call]
    if not is_alias:
        loader.composed_nodes += 1
        if loader.composed_nodes > MAX_FILE_NODES:
            message = f"the file holds more than {MAX_FILE_NODES} values"
            raise yaml.composer.ComposerError(None, None, message, mark)
    node = yaml.SafeLoader.compose_node(loader, parent, index)
    if is_alias and node is not None:
        if _holds_include(node, loader.include_nodes):
            # Its size is not known before the file is read: include the file again instead.
            message = "an alias cannot repeat a node that holds '!include'"
            raise yaml.composer.ComposerError(None, None, message, mark)
        loader.expanded_nodes[0] += _node_size(node, loader.node_sizes)
        if loader.expanded_nodes[0] > MAX_EXPANDED_NODES:
            message = f"aliases expand this file past {MAX_EXPANDED_NODES} values"
            raise yaml.composer.ComposerError(None, None, message, mark)
    return node


def _holds_include(node: yaml.Node, seen: dict[int, bool]) -> bool:
    """Whether ``node`` is or contains an ``!include``."""
    known = seen.get(id(node))
    if known is not None:
        return known
    holds = node.tag == _INCLUDE_TAG
    if isinstance(node, yaml.SequenceNode):
        holds = holds or any(_holds_include(item, seen) for item in node.value)
    elif isinstance(node, yaml.MappingNode):
        holds = holds or any(
            _holds_include(k, seen) or _holds_include(v, seen) for k, v in node.value
        )
    seen[id(node)] = holds
    return holds


def _node_size(node: yaml.Node, sizes: dict[int, int]) -> int:
    """How many nodes ``node`` stands for once every alias in it is expanded."""
    known = sizes.get(id(node))
    if known is not None:
        return known
    size = 1
    if isinstance(node, yaml.SequenceNode):
        size += sum(_node_size(item, sizes) for item in node.value)
    elif isinstance(node, yaml.MappingNode):
        size += sum(_node_size(k, sizes) + _node_size(v, sizes) for k, v in node.value)
    sizes[id(node)] = size
    return size


_WorkflowLoader.compose_node = _compose_counting_aliases  # type: ignore[assignment,method-assign]
_WorkflowLoader.yaml_implicit_resolvers = _without_sexagesimal_numbers_and_dates()
_WorkflowLoader.add_implicit_resolver(_INT_TAG, _INT, list("-+0123456789"))
_WorkflowLoader.add_implicit_resolver(_FLOAT_TAG, _FLOAT, list("-+0123456789."))
_WorkflowLoader.add_constructor(_MAP_TAG, _construct_line_map)


def _construct_include(loader: _WorkflowLoader, node: yaml.Node) -> Any:
    line = loader.file_line(node.start_mark.line + 1)
    if not isinstance(node, yaml.ScalarNode):
        loader.problems.append(Problem(loader.filename, line, "'!include' needs a file name"))
        return None
    if node.value == "":  # `!include : file` -- a key: the enclosing mapping merges it
        return _IncludeKey(line, node.start_mark.column)
    return loader.load_included(node.value, line)


_WorkflowLoader.add_constructor(_INCLUDE_TAG, _construct_include)


def _construct_text(loader: _WorkflowLoader, node: yaml.ScalarNode) -> str:
    """A string, refused (with its line) when the store could not hold it: NUL, or a
    lone surrogate from an escape such as ``"\\ud800"``."""
    value = loader.construct_scalar(node)
    if reason := text_problem(value):
        line = loader.file_line(node.start_mark.line + 1)
        loader.problems.append(Problem(loader.filename, line, f"a string {reason}"))
    return value


_WorkflowLoader.add_constructor(_STR_TAG, _construct_text)

MAX_INTEGER_CHARS = 200  # past any 64-bit literal, even 0b digits with "_" separators


def _construct_number(loader: _WorkflowLoader, node: yaml.ScalarNode) -> int | float:
    """A number, refused (with its line) when the store could not hold it: ``.nan``,
    ``.inf``, a float past ±1.8e308, an integer past 64 bits."""
    number: int | float
    if node.tag == _INT_TAG:
        # Checked on its length first: converting thousands of digits is slow.
        too_long = len(node.value) > MAX_INTEGER_CHARS
        number = 0 if too_long else loader.construct_yaml_int(node)
        bad = too_long or abs(number) > MAX_INTEGER
    else:
        number = loader.construct_yaml_float(node)
        bad = not math.isfinite(number)
    if bad:
        line = loader.file_line(node.start_mark.line + 1)
        message = f"the number {node.value[:40]} cannot be stored: numbers must be finite"
        message += f" and integers within ±{MAX_INTEGER}"
        loader.problems.append(Problem(loader.filename, line, message))
    return number


_WorkflowLoader.add_constructor(_INT_TAG, _construct_number)
_WorkflowLoader.add_constructor(_FLOAT_TAG, _construct_number)


def load_yaml(text: str, filename: str, include: IncludeContext | None = None) -> Any:
    """Parse one YAML document; mappings become :class:`LineMap`.

    ``include`` says where ``!include`` finds files; without it ``!include`` is an error.
    Raises :class:`InvalidWorkflow` with every duplicate key, bad include (at the file and
    line it is in), or with the line of a YAML syntax error; or for ``text`` over
    :data:`MAX_FILE_BYTES` bytes or :data:`MAX_FILE_NODES` values.
    """
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_FILE_BYTES:
        message = (
            f"the file is {size} bytes, over the limit of {MAX_FILE_BYTES} for a workflow file"
        )
        raise InvalidWorkflow([Problem(filename, None, message)])
    try:
        loader = _WorkflowLoader(text, filename, include)
    except yaml.YAMLError as exc:  # e.g. a NUL byte: not a text file
        reason = " ".join(str(exc).split())
        raise InvalidWorkflow([Problem(filename, 1, f"invalid YAML: {reason}")]) from None
    try:
        data = loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = None if mark is None else mark.line + 1
        reason = " ".join(part for part in (exc.context, exc.problem) if part)
        raise InvalidWorkflow([Problem(filename, line, f"invalid YAML: {reason}")]) from None
    except yaml.YAMLError as exc:
        raise InvalidWorkflow([Problem(filename, 1, f"invalid YAML: {exc}")]) from None
    except RecursionError:
        raise InvalidWorkflow([Problem(filename, 1, "YAML is nested too deeply")]) from None
    except ValueError as exc:  # e.g. an integer of thousands of digits
        raise InvalidWorkflow([Problem(filename, 1, f"invalid value: {exc}")]) from None
    finally:
        loader.dispose()
    if loader.problems:
        raise InvalidWorkflow(loader.problems)
    return data
