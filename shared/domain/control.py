"""Control-flow operators: ``loop>``, ``for_each>``, ``for_range>`` and ``if>``.

Each one, once its command is rendered, becomes a ``^sub`` group generated under its task,
with Digdag's names for the iterations (so resume and retry match them):

- ``loop>: N`` -> ``+loop-0`` … ``+loop-<N-1>``, each exporting ``i``;
- ``for_each>: {k: [..], …}`` -> one iteration per combination, ``+for-<key index>=<key>=
  <value index>=<value>&…`` (URL-encoded), each exporting its keys;
- ``for_range>: {from, to, step | slices}`` -> ``+range-from=<a>&to=<b>``, each exporting
  ``range: {from, to, index}``;
- ``if>: bool`` -> ``_do`` when true, ``_else_do`` when false.

The task's ``_parallel`` applies to the iterations (a ``{limit: N}`` window included).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any
from urllib.parse import quote

from tickwork.shared.domain.durations import BadDuration, parse_duration
from tickwork.shared.domain.numbers import whole_number
from tickwork.shared.domain.operators import control_operators
from tickwork.shared.domain.workflow import TaskSpec

CONTROL_OPERATORS = control_operators()
"""The operators this module expands (declared in :mod:`tickwork.shared.domain.operators`)."""
MAX_ITERATIONS = 10_000
"""Iterations one control task may generate; more is an error, not a silent cut."""
MAX_WAIT_SECONDS = 31 * 24 * 3600
"""The longest ``wait>``."""


class BadControl(ValueError):
    """The rendered command of a control operator cannot be used; the message says why."""


def wait_seconds(command: Any, params: Mapping[str, Any] | None = None) -> int:
    """How long a ``wait>`` holds its task, from its rendered command (``10s``, ``1h30m``,
    seconds) and options (``blocking``, ``poll_interval``, see :func:`wait_options`).

    With ``poll_interval`` the task is looked at every interval, as in Digdag, so it ends at
    the first look after its duration has passed.
    """
    try:
        seconds = parse_duration(command, maximum=MAX_WAIT_SECONDS)
    except BadDuration as exc:
        raise BadControl(f"'wait>' {exc}") from None
    poll = wait_options(params or {})
    return seconds if poll is None else max(1, math.ceil(seconds / poll)) * poll


def wait_options(params: Mapping[str, Any]) -> int | None:
    """The ``poll_interval`` of a ``wait>`` in seconds (None when not set), after checking
    its options as Digdag does: ``blocking`` is true or false, ``poll_interval`` a duration
    of at least one second, and only without ``blocking: true``."""
    blocking = wait_blocking(params.get("blocking", False))
    if params.get("poll_interval") is None:
        return None
    poll = wait_poll_interval(params["poll_interval"])
    if blocking:
        raise BadControl("'wait>' poll_interval cannot be set with blocking: true")
    return poll


def wait_blocking(value: Any) -> bool:
    """A ``wait>``'s ``blocking``: true or false (or those strings)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise BadControl(f"'wait>' blocking must be true or false, got {value!r}")


def wait_poll_interval(value: Any) -> int:
    """A ``wait>``'s ``poll_interval`` in seconds: a duration of at least one second."""
    try:
        return parse_duration(value, minimum=1, maximum=MAX_WAIT_SECONDS)
    except BadDuration as exc:
        raise BadControl(f"'wait>' poll_interval {exc}") from None


def parallel_flag(value: Any) -> bool:
    """What a loop's ``_parallel: ${...}`` rendered to: true or false."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise BadControl(f"'_parallel' needs true or false, got {value!r}")


def expand(task: TaskSpec, command: Any) -> TaskSpec | None:
    """The ``^sub`` group ``task`` generates for its rendered ``command``; None when there
    is nothing to run (``if>`` false without ``_else_do``, or no iteration)."""
    if task.operator == "if":
        chosen = task.do if _truth(command) else task.else_do
        return None if chosen is None else _as_sub(chosen)
    if task.do is None:
        raise BadControl(f"'{task.operator}>' needs '_do'")
    iterations = _iterations(task.operator, command)
    if not iterations:
        return None
    children = tuple(
        replace(task.do, name=name, export={**task.do.export, **export})
        for name, export in iterations
    )
    return TaskSpec(
        "^sub", parallel=task.parallel, parallel_limit=task.parallel_limit, children=children
    )


def check_command(operator: str, command: Any) -> None:
    """Raise :class:`BadControl` when a control operator's literal command (one without
    ``${...}``) cannot be used, so that a workflow file is refused before it runs."""
    if operator == "if":
        _truth(command)
    elif operator in CONTROL_OPERATORS:
        _iterations(operator, command)


def _as_sub(chosen: TaskSpec) -> TaskSpec:
    if chosen.is_group:
        return replace(chosen, name="^sub")
    return TaskSpec("^sub", children=(chosen,))


def _truth(command: Any) -> bool:
    if isinstance(command, bool):
        return command
    if isinstance(command, str) and command.strip().lower() in ("true", "false"):
        return command.strip().lower() == "true"
    raise BadControl(f"'if>' needs true or false, got {command!r}")


def _iterations(operator: str | None, command: Any) -> list[tuple[str, dict[str, Any]]]:
    if operator == "loop":
        count = _whole(command, "'loop>' needs a whole number of iterations")
        _check_size(count)
        return [(f"+loop-{i}", {"i": i}) for i in range(count)]
    if operator == "for_each":
        return _for_each(_mapping(command, "for_each"))
    return _for_range(_mapping(command, "for_range"))


def _for_each(values: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    lists: list[list[Any]] = []
    for key, items in values.items():
        parsed = _json_if_text(items)
        if not isinstance(parsed, list):
            raise BadControl(f"'for_each>' needs a list for '{key}', got {items!r}")
        lists.append(parsed)
    _check_size(math.prod(len(items) for items in lists))
    keys = list(values)
    iterations = []
    for picks in itertools.product(*(list(enumerate(items)) for items in lists)):
        parts = [
            f"{k}={quote(key, safe='')}={v}={quote(_text(value), safe='')}"
            for k, (key, (v, value)) in enumerate(zip(keys, picks, strict=True))
        ]
        export = {key: value for key, (_v, value) in zip(keys, picks, strict=True)}
        iterations.append(("+for-" + "&".join(parts), export))
    return iterations


def _for_range(spec: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    unknown = set(spec) - {"from", "to", "step", "slices"}
    if unknown:
        raise BadControl(f"'for_range>' does not know {', '.join(sorted(unknown))}")
    start = _whole(spec.get("from"), "'for_range>' needs a whole number 'from'")
    end = _whole(spec.get("to"), "'for_range>' needs a whole number 'to'")
    if ("step" in spec) == ("slices" in spec):
        raise BadControl("'for_range>' needs one of 'step' and 'slices'")
    if "step" in spec:
        step = _whole(spec["step"], "'for_range>' needs a whole number 'step' above 0")
        if step <= 0:
            raise BadControl("'for_range>' needs a whole number 'step' above 0")
        bounds = [(a, min(a + step, end)) for a in range(start, end, step)]
    else:
        slices = _whole(spec["slices"], "'for_range>' needs a whole number of 'slices' above 0")
        if slices <= 0:
            raise BadControl("'for_range>' needs a whole number of 'slices' above 0")
        size = max(0, end - start)
        cuts = [start + size * n // slices for n in range(slices + 1)]
        bounds = [(a, b) for a, b in itertools.pairwise(cuts) if b > a]
    _check_size(len(bounds))
    return [
        (f"+range-from={a}&to={b}", {"range": {"from": a, "to": b, "index": index}})
        for index, (a, b) in enumerate(bounds)
    ]


def _mapping(command: Any, operator: str) -> dict[str, Any]:
    parsed = _json_if_text(command)
    if not isinstance(parsed, dict):
        raise BadControl(f"'{operator}>' needs a mapping, got {command!r}")
    return parsed


def _json_if_text(value: Any) -> Any:
    """Digdag accepts JSON text where a list or mapping is expected."""
    if isinstance(value, str) and value.strip()[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _whole(value: Any, message: str) -> int:
    number = whole_number(value)
    if number is None:
        raise BadControl(f"{message}, got {value!r}")
    return number


def _check_size(count: int) -> None:
    if count > MAX_ITERATIONS:
        raise BadControl(f"{count} iterations are over the limit of {MAX_ITERATIONS}")


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)
