"""Which tasks ``tickwork run --goal +TASK`` and ``--end +TASK`` run, as Digdag's ``run``
decides it (its ``TaskTree``): what comes *before* a task is the transitive upstream
siblings of the task and of each group around it (their whole subtrees); with ``--end``
the task and everything that is not before it is skipped; with ``--goal`` the task and its
subtree run as well, and the rest is skipped. A skipped task is done without running.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from tickwork.shared.domain.workflow import TaskSpec, WorkflowDefinition, sibling_dependencies
from tickwork.shared.errors import InvalidInput, Problem
from tickwork.shared.store.starts import match_task_name


@dataclass(frozen=True)
class PartialRun:
    """The tasks before the target (they run, or are taken from the last run), and those
    done without running."""

    before: frozenset[str]
    skipped: frozenset[str]


def partial_run(definition: WorkflowDefinition, target: str, option: str) -> PartialRun:
    """The plan of ``--goal`` (``option`` ``--goal``) or ``--end`` toward ``target``;
    InvalidInput naming ``option`` when it names no task of the workflow (or several)."""
    nodes = dict(_walk(definition.root, "", None))
    found = named_task(nodes, target, option)
    chain = _ancestors(nodes, found)
    before: set[str] = set()
    for name in [*chain, found]:
        parent = nodes[name].parent
        if parent is None:
            continue
        siblings = nodes[parent].spec.children
        position = next(i for i, child in enumerate(siblings) if parent + child.name == name)
        for upstream in _upstreams(nodes[parent].spec, position):
            before |= _subtree(nodes, parent + siblings[upstream].name)
    kept = before | set(chain)
    if option == "--goal":
        kept |= _subtree(nodes, found)
    return PartialRun(frozenset(before), frozenset(set(nodes) - kept))


def task_names(definition: WorkflowDefinition) -> list[str]:
    """The full name of every task of the workflow's tree, in file order."""
    return [name for name, _ in _walk(definition.root, "", None)]


def named_task(names: Iterable[str], target: str, option: str) -> str:
    """The full name ``target`` names among ``names`` (itself, or the one it ends); the
    InvalidInput of :func:`match_task_name`, naming ``option``."""
    try:
        return match_task_name(names, target)
    except InvalidInput as exc:
        raise InvalidInput([Problem(option, None, p.message) for p in exc.problems]) from None


@dataclass(frozen=True)
class _Node:
    spec: TaskSpec
    parent: str | None


def _walk(spec: TaskSpec, prefix: str, parent: str | None) -> Iterator[tuple[str, _Node]]:
    name = prefix + spec.name
    yield name, _Node(spec, parent)
    for child in spec.children:
        yield from _walk(child, name, name)


def _ancestors(nodes: dict[str, _Node], name: str) -> list[str]:
    found: list[str] = []
    parent = nodes[name].parent
    while parent is not None:
        found.append(parent)
        parent = nodes[parent].parent
    return found


def _upstreams(group: TaskSpec, position: int) -> set[int]:
    """The indexes of the children of ``group`` that child ``position`` waits for, at any
    distance."""
    direct: dict[int, set[int]] = {}
    for up, down in sibling_dependencies(group):
        direct.setdefault(down, set()).add(up)
    found: set[int] = set()
    pending = list(direct.get(position, ()))
    while pending:
        index = pending.pop()
        if index not in found:
            found.add(index)
            pending.extend(direct.get(index, ()))
    return found


def _subtree(nodes: dict[str, _Node], name: str) -> set[str]:
    return {other for other in nodes if other == name or other.startswith(name + "+")}
